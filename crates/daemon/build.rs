//! Tells the program how optimised it was built, for `--version`: a benchmark of a test
//! build (the `ci` profile leaves dependencies unoptimised) measures the wrong program,
//! so the benchmark reads this line and refuses one.

fn main() {
    let level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SHIPWORM_OPT_LEVEL={level}");
    println!("cargo:rerun-if-changed=build.rs");
}
