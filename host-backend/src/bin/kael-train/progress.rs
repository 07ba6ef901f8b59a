//! Training progress: indicatif's bar on a terminal; otherwise (CI logs, a
//! pipe, `| tee`) one plain line every `every` steps with loss, tokens/s
//! and ETA, so a run that is not watched live still reports.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

pub enum Progress {
    Bar(ProgressBar),
    Lines {
        steps: usize,
        every: usize,
        started: Instant,
    },
}

impl Progress {
    /// A bar when stderr (where indicatif draws) is a terminal, else lines
    /// every `every` steps (0: about ten lines per run).
    pub fn new(steps: usize, every: usize) -> Result<Self, indicatif::style::TemplateError> {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(steps as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "step {pos:>4}/{len} [{bar:28.cyan/blue}] {msg} | {elapsed_precise} ETA {eta}",
                )?
                .progress_chars("=> "),
            );
            Ok(Progress::Bar(bar))
        } else {
            let every = if every == 0 {
                (steps / 10).max(1)
            } else {
                every
            };
            Ok(Progress::Lines {
                steps,
                every,
                started: Instant::now(),
            })
        }
    }

    /// After step `done` (1-based) of training: its loss and throughput.
    pub fn step(&self, done: usize, loss: f32, tok_s: f64) {
        match self {
            Progress::Bar(bar) => {
                bar.set_message(format!("loss {loss:.3} | {tok_s:>6.0} tok/s"));
                bar.inc(1);
            }
            Progress::Lines {
                steps,
                every,
                started,
            } => {
                if done % every == 0 || done == *steps {
                    let elapsed = started.elapsed().as_secs_f64();
                    let eta = elapsed / done as f64 * (steps - done) as f64;
                    println!(
                        "step {done:>4}/{steps}: loss {loss:.3}, {tok_s:.0} tok/s, elapsed {elapsed:.1} s, ETA {eta:.1} s"
                    );
                }
            }
        }
    }

    /// Prints `line` without tearing the bar.
    pub fn println(&self, line: &str) {
        match self {
            Progress::Bar(bar) => bar.suspend(|| println!("{line}")),
            Progress::Lines { .. } => println!("{line}"),
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}
