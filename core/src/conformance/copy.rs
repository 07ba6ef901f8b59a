//! Casts, copies, fills and in-place ops.
//!
//! Writes go through views (transposed, stepped, rank 8), and the check
//! compares the *whole* base tensor afterwards: elements outside the view
//! must be left as they were.

use super::cases::{Arg, Domain, LAYOUTS, Layout, describe, describe_args, random};
use super::check::Checker;
use super::elementwise::{FLOATS, NUMERIC};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use alloc::vec;

/// Values for casts: spread out (so float to int truncates and saturates,
/// and u8 sees negatives), including whole numbers and zeros.
fn cast_input(c: &mut Checker<'_>, shape: &[usize], dt: DType) -> Result<Tensor> {
    if dt.is_float() {
        random(&mut c.rng, shape, DType::F64, Domain::Normal)?
            .mul_scalar(3.0)?
            .to_dtype(dt)
    } else {
        random(&mut c.rng, shape, dt, Domain::Normal)
    }
}

/// `to_dtype` between every ordered pair of distinct dtypes, every layout.
pub(super) fn casts(c: &mut Checker<'_>) {
    for from in DType::ALL {
        for to in DType::ALL {
            if from == to || !c.wants(&[from, to]) {
                continue;
            }
            for layout in LAYOUTS {
                let x = cast_input(c, layout.base_shape(), from);
                let case =
                    alloc::format!("{} -> {}", describe(from, layout), super::cases::dname(to));
                c.check("to_dtype", case, 1, x.map(|x| vec![x]), |x| {
                    Ok(vec![layout.view(&x[0])?.to_dtype(to)?])
                });
            }
        }
    }
}

/// `deep_clone`, `contiguous`, `copy_` (both directions and casting),
/// `fill_`, `zero_`.
pub(super) fn copies(c: &mut Checker<'_>) {
    for dt in c.dtypes(&DType::ALL) {
        for layout in LAYOUTS {
            let case = describe(dt, layout);
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            c.check("deep_clone", case.clone(), 1, x.map(|x| vec![x]), |x| {
                let y = layout.view(&x[0])?.deep_clone()?;
                // a deep clone is contiguous and sized to its elements
                let exact = y.is_contiguous() && y.storage_nbytes() == y.numel() * y.element_size();
                Ok(vec![
                    y,
                    Tensor::scalar(exact, &crate::device::Device::cpu())?,
                ])
            });
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            c.check("contiguous", case.clone(), 1, x.map(|x| vec![x]), |x| {
                Ok(vec![layout.view(&x[0])?.contiguous()?])
            });
            // copy_ from the view into a fresh contiguous tensor
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            let into = alloc::format!("{case} -> contiguous");
            c.check("copy_", into, 1, x.map(|x| vec![x]), |x| {
                let src = layout.view(&x[0])?;
                let dst = Tensor::zeros(src.shape(), dt, &src.device())?;
                dst.copy_(&src)?;
                Ok(vec![dst])
            });
            if layout.writable() {
                // copy_ from a contiguous tensor into the view
                let inputs =
                    random(&mut c.rng, layout.base_shape(), dt, Domain::Normal).and_then(|b| {
                        Ok(vec![
                            b,
                            random(&mut c.rng, layout.shape(), dt, Domain::Normal)?,
                        ])
                    });
                let into = alloc::format!("contiguous -> {case}");
                c.check("copy_", into, 1, inputs, |x| {
                    layout.view(&x[0])?.copy_(&x[1])?;
                    Ok(vec![x[0].clone()])
                });
                let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
                c.check("fill_", case.clone(), 1, x.map(|x| vec![x]), |x| {
                    layout.view(&x[0])?.fill_(3.0)?;
                    Ok(vec![x[0].clone()])
                });
                let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
                c.check("zero_", case.clone(), 1, x.map(|x| vec![x]), |x| {
                    layout.view(&x[0])?.zero_()?;
                    Ok(vec![x[0].clone()])
                });
            }
        }
        // copy_ with a cast (f32 source) and with a broadcast source row
        if dt != DType::F32 && c.wants(&[DType::F32]) {
            let inputs = random(&mut c.rng, &[4, 3], dt, Domain::Normal)
                .and_then(|b| Ok(vec![b, cast_input(c, &[3, 4], DType::F32)?]));
            let case = alloc::format!("f32 [3, 4] -> {}", describe(dt, Layout::Transposed));
            c.check("copy_", case, 1, inputs, |x| {
                x[0].t()?.copy_(&x[1])?;
                Ok(vec![x[0].clone()])
            });
        }
        let inputs = random(&mut c.rng, &[3, 9], dt, Domain::Normal)
            .and_then(|b| Ok(vec![b, random(&mut c.rng, &[4], dt, Domain::Normal)?]));
        let case = alloc::format!("[4] -> {}", describe(dt, Layout::Stepped));
        c.check("copy_", case, 1, inputs, |x| {
            Layout::Stepped.view(&x[0])?.copy_(&x[1])?;
            Ok(vec![x[0].clone()])
        });
    }
}

/// `add_`, `sub_`, `mul_`, `div_` (same-shape, row, rank-0 and exactly
/// aliased operands) and `clamp_`, written through each layout's view.
pub(super) fn in_place(c: &mut Checker<'_>) {
    type InPlaceFn = fn(&Tensor, &Tensor) -> Result<()>;
    let ops: [(&'static str, InPlaceFn, bool, Domain); 4] = [
        ("add_", Tensor::add_, true, Domain::Normal),
        ("sub_", Tensor::sub_, true, Domain::Normal),
        ("mul_", Tensor::mul_, true, Domain::Normal),
        ("div_", Tensor::div_, false, Domain::NonZero),
    ];
    for (op, f, ints, domain) in ops {
        let dtypes = if ints { &NUMERIC[..] } else { &FLOATS[..] };
        for dt in c.dtypes(dtypes) {
            for layout in LAYOUTS.into_iter().filter(|l| l.writable()) {
                let operands = [
                    Arg::View(Layout::Contiguous),
                    Arg::View(layout),
                    Arg::Row(layout),
                    Arg::Scalar,
                ];
                for other in operands {
                    // the same-shape operand: contiguous, of the view's shape
                    let other_shape = match other {
                        Arg::View(Layout::Contiguous) => layout.shape(),
                        a => a.base_shape(),
                    };
                    let inputs = random(&mut c.rng, layout.base_shape(), dt, domain)
                        .and_then(|b| Ok(vec![b, random(&mut c.rng, other_shape, dt, domain)?]));
                    let case = match other {
                        Arg::View(Layout::Contiguous) => alloc::format!(
                            "{} | contiguous {:?}",
                            describe(dt, layout),
                            layout.shape()
                        ),
                        a => describe_args(dt, &[Arg::View(layout), a]),
                    };
                    c.check(op, case, 1, inputs, |x| {
                        let o = match other {
                            Arg::View(Layout::Contiguous) => x[1].clone(),
                            a => a.view(&x[1])?,
                        };
                        f(&layout.view(&x[0])?, &o)?;
                        Ok(vec![x[0].clone()])
                    });
                }
                // exactly aliased: v op= v
                let x = random(&mut c.rng, layout.base_shape(), dt, domain);
                let case = alloc::format!("{}, aliased (x {op} x)", describe(dt, layout));
                c.check(op, case, 1, x.map(|x| vec![x]), |x| {
                    let v = layout.view(&x[0])?;
                    f(&v, &v)?;
                    Ok(vec![x[0].clone()])
                });
            }
        }
    }
    for dt in c.dtypes(&NUMERIC) {
        for layout in LAYOUTS.into_iter().filter(|l| l.writable()) {
            let x = random(&mut c.rng, layout.base_shape(), dt, Domain::Normal);
            let case = alloc::format!("{}, [-2, 1]", describe(dt, layout));
            c.check("clamp_", case, 1, x.map(|x| vec![x]), |x| {
                layout.view(&x[0])?.clamp_(Some(-2.0), Some(1.0))?;
                Ok(vec![x[0].clone()])
            });
        }
    }
}
