//! Tells the benchmark how optimised it was built: a test build (the `ci` profile leaves
//! dependencies unoptimised, SHA-256 of every transfer among them) measures the wrong
//! program, so a full run refuses one.

fn main() {
    let level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SHIPWORM_OPT_LEVEL={level}");
    println!("cargo:rerun-if-changed=build.rs");
}
