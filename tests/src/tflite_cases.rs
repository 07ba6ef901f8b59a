//! Reading `tests/data/tflite/cases.txt` (written by gen.py).

/// The float input TFLite was given for run `run` of `model` (its first
/// QUANTIZE's input) and the float output it produced (its last
/// DEQUANTIZE's output), read from `cases`, the text of
/// `tests/data/tflite/cases.txt`.
pub fn tflite_io(cases: &str, model: &str, run: usize) -> (Vec<f32>, Vec<f32>) {
    let mut input = None;
    let mut output = None;
    let mut op = "";
    let prefix = format!("case {model}_run{run}_op");
    for line in cases.lines() {
        if line.starts_with("case ") {
            op = if line.starts_with(&prefix) {
                line.split(' ').nth(2).unwrap_or("")
            } else {
                ""
            };
        }
        let data = || {
            line.split("data=")
                .nth(1)
                .unwrap()
                .split(',')
                .map(|v| v.parse::<f32>().unwrap())
                .collect::<Vec<_>>()
        };
        if op == "quantize" && line.starts_with("tensor in0 ") && input.is_none() {
            input = Some(data());
        }
        if op == "dequantize" && line.starts_with("tensor out ") {
            output = Some(data());
        }
    }
    (input.unwrap(), output.unwrap())
}
