//! `#[derive(Module)]` (kael-derive; NOTE [Derived modules]): a model
//! written as a struct gets `Module` with PyTorch's state-dict keys, checked
//! against the keys PyTorch gives the same model (written out below from
//! `torch.nn.Module.state_dict()` of the equivalent PyTorch class), and
//! trains as a hand-written `visit` would.

use kael_core::nn::{Flatten, Linear, Module};
use kael_core::{DType, Device, Rng, Tensor};
use kael_derive::Module;

/// PyTorch:
/// ```python
/// class Net(nn.Module):
///     def __init__(self):
///         super().__init__()
///         self.flatten = nn.Flatten()
///         self.fc1 = nn.Linear(6, 4)
///         self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4, bias=False)])
///         self.head = nn.Linear(4, 2)
///         self.scale = nn.Parameter(torch.ones(2))
///         self.register_buffer("offset", torch.zeros(2))
///         self.extra = None
/// ```
#[derive(Module)]
struct Net {
    flatten: Flatten,
    fc1: Linear,
    blocks: Vec<Linear>,
    head: Option<Linear>,
    scale: Tensor,
    #[module(buffer)]
    offset: Tensor,
    extra: Option<Linear>,
    hidden: usize,
    #[module(skip)]
    note: &'static str,
}

impl Net {
    fn new(dev: &Device, rng: &mut Rng) -> kael_core::Result<Net> {
        Ok(Net {
            flatten: Flatten::default(),
            fc1: Linear::new(6, 4, true, dev, rng)?,
            blocks: vec![
                Linear::new(4, 4, true, dev, rng)?,
                Linear::new(4, 4, false, dev, rng)?,
            ],
            head: Some(Linear::new(4, 2, true, dev, rng)?),
            scale: Tensor::ones(&[2], DType::F32, dev)?.requires_grad_(true)?,
            offset: Tensor::zeros(&[2], DType::F32, dev)?,
            extra: None,
            hidden: 4,
            note: "derived",
        })
    }

    fn forward(&self, x: &Tensor) -> kael_core::Result<Tensor> {
        let mut h = self.fc1.forward(&self.flatten.forward(x)?)?.relu()?;
        for b in &self.blocks {
            h = b.forward(&h)?.relu()?;
        }
        let head = self.head.as_ref().map(|m| m.forward(&h)).transpose()?;
        let y = head.unwrap_or(h);
        y.mul(&self.scale)?.add(&self.offset)
    }
}

#[test]
fn state_dict_keys_are_pytorchs() {
    let m = Net::new(&Device::cpu(), &mut Rng::new(0)).unwrap();
    assert_eq!((m.hidden, m.note), (4, "derived"));
    let keys: Vec<String> = m.state_dict().into_iter().map(|(k, _)| k).collect();
    // list(Net().state_dict().keys()) in PyTorch 2.15
    let torch = [
        "fc1.weight",
        "fc1.bias",
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.1.weight",
        "head.weight",
        "head.bias",
        "scale",
        "offset",
    ];
    let mut got = keys.clone();
    let mut want: Vec<String> = torch.iter().map(|s| s.to_string()).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // parameters exclude the buffer
    let params: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert!(!params.contains(&"offset".to_string()) && params.contains(&"scale".to_string()));
    assert_eq!(
        m.num_parameters(),
        6 * 4 + 4 + 4 * 4 + 4 + 4 * 4 + 4 * 2 + 2 + 2
    );
}

#[test]
fn a_derived_module_trains_through_its_parameters() {
    let dev = Device::cpu();
    let m = Net::new(&dev, &mut Rng::new(1)).unwrap();
    let x = Tensor::randn(&[3, 2, 3], DType::F32, &dev, &mut Rng::new(2)).unwrap();
    let y = Module::forward(&m, &x).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    y.sum_all().unwrap().backward().unwrap();
    for (name, p) in m.named_parameters() {
        assert!(p.grad().is_some(), "{name} has no gradient");
    }
}
