//! The autograd graph as Graphviz DOT.

use super::{Node, grad_edge};
use crate::shared::Shared;
use crate::tensor::Tensor;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// The graph behind `t` in DOT: one box per node (op name; leaves show
/// their shape), edges from each node to the nodes it sends gradients to.
///
/// ```
/// use kael_core::{Device, Tensor};
/// let x = Tensor::ones(&[2], kael_core::DType::F32, &Device::cpu())?.requires_grad_(true)?;
/// let y = x.mul(&x)?.sum_all()?;
/// let dot = kael_core::autograd::to_dot(&y);
/// assert!(dot.starts_with("digraph"));
/// assert!(dot.contains("SumBackward") && dot.contains("MulBackward") && dot.contains("AccumulateGrad"));
/// # Ok::<(), kael_core::Error>(())
/// ```
pub fn to_dot(t: &Tensor) -> String {
    let mut s = String::from("digraph autograd {\n  node [shape=box];\n");
    let Some(root) = grad_edge(t) else {
        s.push_str("}\n");
        return s;
    };
    let mut seen: Vec<usize> = Vec::new();
    let mut stack: Vec<Shared<Node>> = alloc::vec![root];
    while let Some(n) = stack.pop() {
        let id = Node::id(&n);
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        match n.leaf.as_ref().and_then(crate::tensor::WeakTensor::upgrade) {
            Some(leaf) => {
                let _ = writeln!(
                    s,
                    "  n{id:x} [label=\"AccumulateGrad\\n{:?}\", style=filled, fillcolor=lightblue];",
                    leaf.shape()
                );
            }
            None => {
                let _ = writeln!(s, "  n{id:x} [label=\"{}\"];", n.name);
            }
        }
        for next in n.next_nodes() {
            let _ = writeln!(s, "  n{id:x} -> n{:x};", Node::id(next));
            stack.push(next.clone());
        }
    }
    s.push_str("}\n");
    s
}
