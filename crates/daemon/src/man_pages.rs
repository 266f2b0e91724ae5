//! The manual pages in `packaging/man/` are made from the command-line definitions
//! (`cli.rs`, by `clap_mangen`): `shipworm(8)` and one page per subcommand. This test
//! fails when they differ from what the definitions make now;
//! `SHIPWORM_BLESS=1 cargo test -p shipworm --bin shipworm man_pages` rewrites them.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// Each page's file name and text.
fn pages() -> Vec<(String, Vec<u8>)> {
    let top = crate::cli::Cli::command();
    let render = |cmd: clap::Command| {
        let mut text = Vec::new();
        clap_mangen::Man::new(cmd).section("8").render(&mut text).expect("rendering to memory");
        text
    };
    let mut pages = vec![("shipworm.8".to_string(), render(top.clone()))];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        // clap takes a page's name as a static string (its `string` feature is off).
        let name: &'static str = Box::leak(format!("shipworm-{}", sub.get_name()).into_boxed_str());
        pages.push((format!("{name}.8"), render(sub.clone().name(name))));
    }
    pages
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/man")
}

#[test]
fn man_pages_are_made_from_the_command_line_definitions() {
    let bless = std::env::var_os("SHIPWORM_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, text) in pages() {
        let path = dir().join(&name);
        if bless {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(&text[..]) {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "packaging/man/{{{}}} differ from the command-line definitions: SHIPWORM_BLESS=1 cargo test -p shipworm --bin shipworm man_pages",
        stale.join(",")
    );
}
