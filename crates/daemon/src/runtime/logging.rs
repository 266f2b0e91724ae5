//! Log set-up: human-readable lines on stderr; `SHIPWORM_LOG` (e.g. `debug`) or `-v`
//! chooses the level.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Start logging at `default` unless `SHIPWORM_LOG` says otherwise.
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_env("SHIPWORM_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
