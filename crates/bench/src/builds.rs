//! Which builds a measurement may use. A test build (the test command's `ci` profile:
//! the workspace at opt-level 1, its dependencies unoptimised) runs the lab's SHA-256
//! of every transferred byte, and the daemon's own dependencies, several times slower
//! than a release build: measured on one, the chains of shipworm and Miredo came out
//! alike, bound by the hashing. A full run refuses such a build unless asked.

use crate::error::Failure;
use std::path::Path;

/// How optimised this program was built (cargo's `OPT_LEVEL`, by the build script).
const OWN_LEVEL: &str = env!("SHIPWORM_OPT_LEVEL");

/// Whether a build at `level` is one users run (the release profile's 3, or 2).
fn optimised(level: &str) -> bool {
    matches!(level, "2" | "3")
}

/// The opt-level a `shipworm` binary says it was built at (`--version`'s `build:`
/// line), or why it cannot be told.
pub(crate) fn binary_level(bin: &Path) -> String {
    let out = match std::process::Command::new(bin).arg("--version").output() {
        Ok(o) => o,
        Err(e) => return format!("unknown ({} would not run: {e})", bin.display()),
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("build: opt-level ").map(|v| v.trim().to_string()))
        .unwrap_or_else(|| "unknown (its --version names no build: built before it did)".into())
}

/// Refuses a measurement on a build users do not run, this program's own or `bin`'s,
/// naming the fix; `any` (`--any-build`) measures it anyway, said on stderr.
pub(crate) fn check(bin: Option<&Path>, any: bool) -> Result<(), Failure> {
    let mut wrong = Vec::new();
    if !optimised(OWN_LEVEL) {
        wrong.push(format!("this benchmark was built at opt-level {OWN_LEVEL}"));
    }
    if let Some(bin) = bin {
        let level = binary_level(bin);
        if !optimised(&level) {
            wrong.push(format!("{} was built at opt-level {level}", bin.display()));
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    let what = wrong.join(" and ");
    if any {
        eprintln!("shipworm-bench: measuring anyway (--any-build): {what}");
        return Ok(());
    }
    Err(Failure::runtime(format!(
        "{what}: a test build (the ci profile: dependencies unoptimised) would measure the build, not the \
         program. Build both optimised (cargo build --release -p shipworm -p shipworm-bench) and run \
         target/release/shipworm-bench, or pass --any-build to measure this build anyway"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_release_levels_count_as_optimised() {
        assert!(optimised("3") && optimised("2"));
        assert!(!optimised("1") && !optimised("0") && !optimised("unknown (…)"));
    }

    #[test]
    fn a_binary_without_a_build_line_is_unknown_and_refused() {
        // /bin/true prints nothing for --version: a binary built before the line.
        let level = binary_level(Path::new("/bin/true"));
        assert!(level.starts_with("unknown"), "{level}");
        let refused = check(Some(Path::new("/bin/true")), false);
        assert!(refused.is_err_and(|f| f.message.contains("--any-build")));
        assert!(check(Some(Path::new("/bin/true")), true).is_ok());
    }
}
