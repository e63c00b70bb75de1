//! A spinner on stderr for the slow reads (table scans, queue reads). indicatif draws only when
//! stderr is a terminal, so scripts and `--json` pipelines see nothing of it.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Spins with `message` until dropped or [`Spinner::done`].
pub struct Spinner(ProgressBar);

impl Spinner {
    pub fn start(message: impl Into<String>) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner(bar)
    }

    pub fn set_message(&self, message: impl Into<String>) {
        self.0.set_message(message.into());
    }

    pub fn done(self) {
        self.0.finish_and_clear();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if !self.0.is_finished() {
            self.0.finish_and_clear();
        }
    }
}
