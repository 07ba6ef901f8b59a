//! A multi-tensor write validates everything, including each destination's
//! writability and borrow, before its first write (README, "Reliability
//! promises"): `Module::load_state_dict` refused for any reason leaves
//! every parameter as it was, and refuses two entries of one name.

mod common;

use kael_core::nn::{Linear, Module};
use kael_core::{DType, Device, Error, Rng, Tensor};
use kael_host::safetensors_io::{load, save};

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn entries(m: &Linear, scale: f32) -> Vec<(String, Tensor)> {
    m.state_dict()
        .into_iter()
        .map(|(n, t)| (n, t.mul_scalar(f64::from(scale)).unwrap()))
        .collect()
}

/// A Linear whose bias (after the weight in the state dict) is a
/// read-only memory map of a safetensors file.
fn with_mapped_bias(dir: &std::path::Path) -> Linear {
    let dev = Device::cpu();
    let file = dir.join("bias.safetensors");
    let b = Tensor::from_slice(&[0.5f32, -0.5], &[2], &dev).unwrap();
    save(&file, &[("bias", &b)]).unwrap();
    let mapped = load(&file).unwrap().tensor("bias").unwrap();
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &dev).unwrap();
    Linear::from_weights(w, Some(mapped)).unwrap()
}

#[test]
fn a_read_only_parameter_found_late_leaves_the_earlier_ones_unchanged() {
    let dir = std::env::temp_dir().join(format!("kael-aon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = with_mapped_bias(&dir);
    let before = (vals(&m.weight), vals(m.bias.as_ref().unwrap()));
    let err = m.load_state_dict(&entries(&m, 2.0)).unwrap_err();
    assert_eq!(err.op(), Some("load_state_dict"), "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!((vals(&m.weight), vals(m.bias.as_ref().unwrap())), before);
    assert_eq!(m.weight.version(), 0, "the weight was never written");
    let _ = std::fs::remove_dir_all(&dir);
}

test_device!(
    a_borrowed_parameter_found_late_leaves_the_earlier_ones_unchanged,
    |dev| {
        let m = Linear::new(3, 2, true, dev, &mut Rng::new(1))?;
        let before = (vals(&m.weight), vals(m.bias.as_ref().unwrap()));
        let new = entries(&m, 2.0);
        let bias = m.bias.clone().unwrap();
        let storage = bias.storage();
        let guard = storage.read("test")?; // a reader that has not let go
        let err = m.load_state_dict(&new).unwrap_err();
        drop(guard);
        assert!(
            matches!(
                err,
                Error::BorrowConflict {
                    op: "load_state_dict"
                }
            ),
            "{err}"
        );
        assert_eq!((vals(&m.weight), vals(m.bias.as_ref().unwrap())), before);
        // once the guard is gone the same load lands whole
        m.load_state_dict(&new)?;
        assert_eq!(
            vals(&m.weight),
            before.0.iter().map(|v| v * 2.0).collect::<Vec<_>>()
        );
        Ok(())
    }
);

test_device!(two_entries_of_one_name_are_refused, |dev| {
    let m = Linear::new(3, 2, true, dev, &mut Rng::new(1))?;
    let before = vals(&m.weight);
    let mut e = entries(&m, 2.0);
    e.push((
        String::from("weight"),
        Tensor::zeros(&[2, 3], DType::F32, dev)?,
    ));
    let err = m.load_state_dict(&e).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                op: "load_state_dict",
                ..
            }
        ) && err.to_string().contains("twice"),
        "{err}"
    );
    assert_eq!(vals(&m.weight), before);
    Ok(())
});
