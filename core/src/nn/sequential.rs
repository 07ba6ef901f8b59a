//! A chain of modules.

use super::module::{Module, Visitor};
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::boxed::Box;
use alloc::vec::Vec;

/// Runs modules one after another (PyTorch's `nn.Sequential`); children are
/// named `"0"`, `"1"`, ... in order.
///
/// ```
/// use kael_core::nn::{Module, Relu, Sequential, Tanh};
/// use kael_core::{Device, Tensor};
/// let s = Sequential::new().push(Relu).push(Tanh);
/// let x = Tensor::from_slice(&[-1.0f32, 0.0], &[2], &Device::cpu())?;
/// assert_eq!(s.forward(&x)?.to_vec::<f32>()?, vec![0.0, 0.0]);
/// assert_eq!(s.len(), 2);
/// # Ok::<(), kael_core::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// An empty chain (its forward is the identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// The chain with `layer` appended (builder style).
    #[must_use]
    pub fn push<M: Module + 'static>(mut self, layer: M) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends an already boxed layer.
    pub fn push_boxed(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layer `i`, if any.
    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.layers.get(i).map(|b| &**b)
    }
}

impl Module for Sequential {
    /// Feeds `input` through every layer in order.
    ///
    /// # Errors
    /// The first error of a layer.
    fn forward(&self, input: &Tensor) -> Result<Tensor> {
        let mut x = input.clone();
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }

    fn visit(&self, v: &mut dyn Visitor) {
        let mut name = alloc::string::String::new();
        for (i, layer) in self.layers.iter().enumerate() {
            name.clear();
            let _ = core::fmt::Write::write_fmt(&mut name, format_args!("{i}"));
            v.module(&name, &**layer);
        }
    }
}
