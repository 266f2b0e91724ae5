//! `shipworm check-config`: read a configuration file as the daemon would and say what
//! it means, or one line naming the file, line and reason (exit status 2).

use crate::cli;
use crate::config::{directives, miredo, server};
use crate::runtime::{privileges, Failure};

/// Check `args.file` for `args.role`, or for the role its directives tell.
pub fn run(args: &cli::CheckConfigArgs) -> Result<(), Failure> {
    let role = match args.role {
        Some(r) => r,
        None => {
            let file = directives::ConfigFile::read(&args.file).map_err(|e| Failure::usage(e.to_string()))?;
            let (role, why) = infer_role(&file, &args.file).map_err(|e| Failure::usage(e.to_string()))?;
            println!("{}: {why}", args.file.display());
            role
        }
    };
    match role {
        cli::Role::Server => {
            let s = server::load(Some(&args.file), &Default::default()).map_err(|e| Failure::usage(e.to_string()))?;
            let p = &s.proto;
            println!("{}: valid server configuration", args.file.display());
            println!("  primary    {}:3544", p.primary);
            println!("  secondary  {}:3544", p.secondary);
            println!(
                "  prefix     {}/64 advertised",
                shipworm_wire::teredo_addr::TeredoAddr::client_prefix(p.prefix, p.primary)
            );
            println!("  MTU        {}", p.mtu);
            println!("  ICMPv6 forwarded up to {} bytes", p.max_forwarded_icmpv6);
            if !p.secure() {
                println!("  secure qualification off");
            } else {
                println!(
                    "  secure qualification required ({} clients, {} with a retired key)",
                    p.clients.len(),
                    p.retired.len()
                );
            }
            println!("  runs as    {}", known_user(&args.file, s.user.as_deref())?);
        }
        cli::Role::Miredo => {
            let c = miredo::load(&args.file, None).map_err(|e| Failure::usage(e.to_string()))?;
            for w in &c.warnings {
                println!("warning: {w}");
            }
            println!("{}: valid {:?} configuration", args.file.display(), c.role);
            println!("  interface  {} (MTU {})", c.interface, c.mtu);
            println!("  UDP        {}:{}", c.bind_address, c.bind_port);
            // Names are checked for syntax only: the client resolves them when it runs.
            let name_note = |h: &directives::Host| match h {
                directives::Host::Addr(_) => "",
                directives::Host::Name(_) => " (a name, resolved by the running client)",
            };
            if let Some(s) = &c.server {
                println!("  server     {s}{}", name_note(s));
            }
            if let Some(s) = &c.server2 {
                println!("  secondary  {s}{}", name_note(s));
            }
            for s in &c.fallback_servers {
                println!("  fallback   {s}{}", name_note(s));
            }
            println!("  runs as    {}", known_user(&args.file, c.user.as_deref())?);
        }
    }
    Ok(())
}

/// The role a file is for, from the directives only one of the two formats has; a file
/// with neither (comments, Prefix, InterfaceMTU) by its name, as Miredo's daemons would
/// read it: miredo-server.conf is a server's, anything else a client's. Why, for the user.
/// The user the daemon would become, which must exist on this host: a daemon told to
/// become a user that does not exist stops at start-up, after the file was "valid".
fn known_user(path: &std::path::Path, configured: Option<&str>) -> Result<String, Failure> {
    let user = privileges::user_name(configured);
    if nix::unistd::User::from_name(user).ok().flatten().is_some() {
        return Ok(user.to_string());
    }
    // Where the file names it, its line; otherwise the default the daemon would take.
    let line = directives::ConfigFile::read(path)
        .ok()
        .and_then(|f| f.directives().iter().find(|d| d.name.eq_ignore_ascii_case("User")).map(|d| d.line));
    let at = line.map_or_else(|| format!("{}", path.display()), |l| format!("{}:{l}", path.display()));
    Err(Failure::usage(format!("{at}: User {user}: no such user on this host (create it, or name another)")))
}

fn infer_role(
    file: &directives::ConfigFile,
    path: &std::path::Path,
) -> Result<(cli::Role, String), directives::ConfigError> {
    let only_in = |these: &[&str], those: &[&str]| -> Option<directives::Directive> {
        let mine = |n: &str| {
            these.iter().any(|d| d.eq_ignore_ascii_case(n)) && !those.iter().any(|d| d.eq_ignore_ascii_case(n))
        };
        file.directives().iter().find(|d| mine(&d.name)).cloned()
    };
    let server_only = only_in(server::DIRECTIVES, miredo::DIRECTIVES);
    let miredo_only = only_in(miredo::DIRECTIVES, server::DIRECTIVES);
    match (server_only, miredo_only) {
        (Some(s), Some(m)) => Err(file.error(
            &m,
            format!(
                "{} is a client or relay directive but line {} has the server's {}: give --role server or --role miredo",
                m.name, s.line, s.name
            ),
        )),
        (Some(s), None) => Ok((cli::Role::Server, format!("a server's file ({} on line {})", s.name, s.line))),
        (None, Some(m)) => {
            Ok((cli::Role::Miredo, format!("a miredo.conf ({} on line {}; --role overrides)", m.name, m.line)))
        }
        (None, None) => {
            let server = path.file_name().is_some_and(|n| n.to_string_lossy().contains("server"));
            let role = if server { cli::Role::Server } else { cli::Role::Miredo };
            let what = if server { "a server's file" } else { "a miredo.conf" };
            Ok((role, format!("{what}, by its name (no directive only one format has; --role overrides)")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn infer(name: &str, text: &str) -> Result<cli::Role, String> {
        let path = Path::new(name);
        let f = directives::ConfigFile::parse(path, text).map_err(|e| e.to_string())?;
        infer_role(&f, path).map(|(r, _)| r).map_err(|e| e.to_string())
    }

    #[test]
    fn check_config_tells_the_role_from_the_file() {
        // Debian's own miredo.conf, checked without --role, is a client's (it was taken for
        // a server's and refused).
        let debian = "# Please refer to the miredo.conf(5) man page for details.\nInterfaceName\tteredo\n\
                      ServerAddress\tteredo-debian.remlab.net\n#BindAddress 0.0.0.0\n#BindPort 3545\n";
        assert_eq!(infer("/etc/miredo/miredo.conf", debian), Ok(cli::Role::Miredo));
        assert_eq!(infer("x.conf", "RelayType cone\nPrefix 2001:0::\n"), Ok(cli::Role::Miredo));
        assert_eq!(infer("x.conf", "serverbindaddress 192.0.2.1\n"), Ok(cli::Role::Server));
        // Directives both formats share tell nothing: the name does.
        assert_eq!(infer("/etc/miredo/miredo-server.conf", "Prefix 2001:0::\n"), Ok(cli::Role::Server));
        assert_eq!(infer("/etc/miredo/miredo-server.conf", "# all defaults\n"), Ok(cli::Role::Server));
        assert_eq!(infer("/etc/miredo/miredo.conf", "InterfaceMTU 1280\n"), Ok(cli::Role::Miredo));
        // A file mixing both is refused with the two lines that disagree.
        let e = infer("x.conf", "ServerBindAddress 192.0.2.1\nRelayType relay\n").unwrap_err();
        assert!(e.starts_with("x.conf:2:") && e.contains("line 1") && e.contains("--role"), "{e}");
    }
}
