//! SIGHUP, as Miredo's users send it: the daemon reads its file again. A file that no
//! longer loads is refused with its line, and the daemon runs on as it was; a file that
//! loads to the same settings (comments, spacing, order, case) changes nothing — the
//! client keeps its address, the relay its peers and its kernel maps. A file whose
//! settings changed needs the daemon set up again (sockets bound, interface made,
//! qualification), which a confined daemon can no longer do itself: under a service
//! manager it stops with [`RESTART_STATUS`], which the units name in
//! `RestartForceExitStatus=`, so that systemd starts it again at once with the new
//! file; started by anything else, it runs on with the old settings and says which
//! directives wait for a restart. The file is read and judged by the configuration
//! reader ([`crate::runtime::config_reader`]), not by the confined daemon.

use crate::config::directives::{ConfigError, ConfigFile};
use std::collections::BTreeSet;

/// The exit status of a daemon stopping to be started again with a changed file
/// (`EX_TEMPFAIL`: "try again"); every unit restarts on it.
pub const RESTART_STATUS: u8 = 75;

/// Whether a file's bytes load to the settings the daemon runs with (`Ok(true)`), to
/// others (`Ok(false)`), or not at all.
pub type SameSettings = Box<dyn Fn(&ConfigFile) -> Result<bool, ConfigError> + Send>;

/// What a reload found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The file loads to the running settings.
    Unchanged,
    /// The file cannot be read or does not load: why, with its line.
    Refused(String),
    /// The settings differ: the directives whose lines differ (as the file spells
    /// them), or none named when only their effect differs.
    Changed(Vec<String>),
}

/// The verdict on the bytes read from `path`: `running` is the file the daemon started
/// with, `same` compares what a file loads to with the settings it runs with.
pub fn judge_bytes(running: &ConfigFile, bytes: &[u8], path: &std::path::Path, same: &SameSettings) -> Verdict {
    let file = match ConfigFile::from_bytes(path, bytes) {
        Ok(f) => f,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    match same(&file) {
        Err(e) => Verdict::Refused(e.to_string()),
        Ok(true) => Verdict::Unchanged,
        Ok(false) => Verdict::Changed(changed_directives(running, &file)),
    }
}

/// The directives whose lines differ between two files (by name, case-insensitive, and
/// value), each named as the new file spells it (or the old one, when it is gone).
pub fn changed_directives(old: &ConfigFile, new: &ConfigFile) -> Vec<String> {
    let lines = |f: &ConfigFile| -> BTreeSet<(String, String)> {
        f.directives().iter().map(|d| (d.name.to_ascii_lowercase(), d.value.clone())).collect()
    };
    let (a, b) = (lines(old), lines(new));
    let differing: BTreeSet<&String> = a.symmetric_difference(&b).map(|(name, _)| name).collect();
    let spelled = |name: &String| {
        new.directives()
            .iter()
            .chain(old.directives())
            .find(|d| d.name.eq_ignore_ascii_case(name))
            .map_or_else(|| name.clone(), |d| d.name.clone())
    };
    differing.into_iter().map(spelled).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse(Path::new("/etc/miredo/miredo.conf"), text).unwrap()
    }

    /// Same settings: the same directive lines; `Bogus` does not load.
    fn same_as(running: &str) -> SameSettings {
        let running = file(running);
        Box::new(move |f: &ConfigFile| {
            if let Some(d) = f.directives().iter().find(|d| d.name.eq_ignore_ascii_case("Bogus")) {
                return Err(f.error(d, "unknown directive Bogus"));
            }
            Ok(changed_directives(&running, f).is_empty())
        })
    }

    #[test]
    fn a_file_that_only_moved_its_comments_and_case_is_unchanged() {
        let running = "RelayType client\nServerAddress 192.0.2.1\n";
        let same = same_as(running);
        // A line that differs is a change; comments, blank lines, order and case are not.
        let other = b"RelayType client\nServerAddress 192.0.2.2\n";
        let got = judge_bytes(&file(running), other, Path::new("f"), &same);
        assert_eq!(got, Verdict::Changed(vec!["ServerAddress".into()]));
        let moved = b"\n# the server\nserveraddress 192.0.2.1   # ours\nRelayType client\n";
        assert_eq!(judge_bytes(&file(running), moved, Path::new("f"), &same), Verdict::Unchanged);
    }

    #[test]
    fn a_changed_file_names_the_directives_that_differ() {
        let old = file("RelayType client\nServerAddress 192.0.2.1\nBindPort 3544\n");
        let new = file("RelayType client\nServerAddress 192.0.2.9\nbindport 3544\nHairpinning no\n");
        assert_eq!(changed_directives(&old, &new), vec!["Hairpinning".to_string(), "ServerAddress".to_string()]);
        // A directive taken out is named as the old file spelled it.
        let fewer = file("RelayType client\n");
        assert_eq!(changed_directives(&old, &fewer), vec!["BindPort".to_string(), "ServerAddress".to_string()]);
    }

    #[test]
    fn a_file_that_no_longer_loads_is_refused_with_its_line() {
        let running = "RelayType client\n";
        let same = same_as(running);
        let got = judge_bytes(&file(running), b"RelayType client\nBogus 1\n", Path::new("/etc/x.conf"), &same);
        assert_eq!(got, Verdict::Refused("/etc/x.conf:2: unknown directive Bogus".into()));
        // Bytes that are no text name their line too.
        let got = judge_bytes(&file(running), b"RelayType client\nUser \xff\n", Path::new("/etc/x.conf"), &same);
        let Verdict::Refused(why) = got else { panic!("{got:?}") };
        assert!(why.starts_with("/etc/x.conf:2: "), "{why}");
    }
}
