//! `shipworm check-config`: read a configuration file as the daemon would and say what
//! it means, or one line naming the file, line and reason (exit status 2).

use crate::cli;
use crate::config::{directives, miredo, server};
use crate::runtime::{privileges, Failure};

/// Check `args.file` for `args.role`.
pub fn run(args: &cli::CheckConfigArgs) -> Result<(), Failure> {
    match args.role {
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
            if p.clients.is_empty() {
                println!("  secure qualification off");
            } else {
                println!("  secure qualification required ({} clients)", p.clients.len());
            }
            println!("  runs as    {}", privileges::user_name(s.user.as_deref()));
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
            println!("  runs as    {}", privileges::user_name(c.user.as_deref()));
        }
    }
    Ok(())
}
