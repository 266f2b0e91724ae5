//! One run of the benchmark: rounds over the implementations, the peer table, the
//! end-to-end chains, then the report.

use crate::buffers::equalize;
use crate::cpus::{self, RELAY_CPU, TRAFFIC_CPU};
use crate::error::Failure;
use crate::measure::*;
use crate::plots::write_report;
use crate::relay_config::*;
use crate::report::*;
use crate::stats::*;
use shipworm::io::socket_buffers::DAEMON_BYTES;
use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::{Impl, NatKind};
use std::collections::BTreeMap;
use std::time::Instant;

/// Run the benchmark.
pub(crate) fn run(args: &crate::BenchArgs) -> Result<(), Failure> {
    let me = Impl::Shipworm(shipworm_binary(args)?);
    let miredo = miredo_installed();
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    let started = Instant::now();
    let mut say = |l: &str| println!("{l}");
    if cpus::available() {
        cpus::pin_traffic().map_err(Failure::runtime)?;
        say(&format!("traffic on CPU {TRAFFIC_CPU}, each relay host on CPU {RELAY_CPU}"));
    } else {
        say("one core: traffic and relay share it");
    }
    let mut runs: BTreeMap<&'static str, Vec<Figures>> = BTreeMap::new();
    for round in 1..=rounds {
        say(&format!("round {round}/{rounds} (at {:.0} s)", started.elapsed().as_secs_f64()));
        relay_round(&mut runs, &me, miredo, args.quick, &mut say)?;
    }
    say(&format!("peer table (at {:.0} s)", started.elapsed().as_secs_f64()));
    let sizes: Vec<usize> = if args.quick { vec![100_000] } else { vec![1_000_000, 10_000_000] };
    // Rounds of each size, a fresh table each, for the figures' spread.
    let tables: Vec<TableFigures> = sizes.iter().flat_map(|&n| (0..TABLE_ROUNDS).map(move |_| peer_table(n))).collect();
    // The peer map full (not in the quick run: it judges nothing); a failure here costs
    // the run only this part's rows.
    let map = if args.quick {
        None
    } else {
        say(&format!("kernel peer map (at {:.0} s)", started.elapsed().as_secs_f64()));
        crate::kernel_path::map_figures(&[1_000, 10_000_000], 20_000, rounds as u32, &mut say)
            .map_err(|e| say(&format!("  kernel peer map not measured: {e}")))
            .ok()
    };
    say(&format!("end to end through a NAT (at {:.0} s)", started.elapsed().as_secs_f64()));
    let e2e = end_to_end(&me, args.quick, &mut say)?;
    let ratios_file = args.out.join("ratios.tsv");
    let previous = read_compared(&ratios_file);
    let (mut report, compared) = report(&runs, &tables, &e2e, args.quick, started.elapsed());
    crate::kernel_path::section(&mut report, &runs, &e2e, map.as_ref());
    report.push_str(&repeatability(previous.as_ref(), &compared));
    write_report(&args.out, &report, &runs)?;
    std::fs::write(&ratios_file, compared.to_tsv())
        .map_err(|e| Failure::runtime(format!("{}: {e}", ratios_file.display())))?;
    println!("\nreport: {}", args.out.join("report.md").display());
    Ok(())
}

/// One round of the relays' measurements: shipworm, shipworm moving every packet itself
/// (not in the quick run), Miredo if installed, the kernel; each implementation's
/// searches start from its earlier rounds' rate.
fn relay_round(
    runs: &mut BTreeMap<&'static str, Vec<Figures>>,
    me: &Impl,
    miredo: bool,
    quick: bool,
    say: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    let hints_of =
        |runs: &BTreeMap<&str, Vec<Figures>>, label: &str| runs.get(label).map_or_else(Hints::new, |r| hints(r));
    let h = hints_of(runs, "shipworm");
    let s = measure_relay("shipworm", me, shipworm_extra(), me, quick, &h, say)?;
    file_relay(runs, "shipworm", s);
    // The same relay moving every packet itself: what the kernel path changes.
    if !quick {
        let h = hints_of(runs, "shipworm-user");
        let u = measure_relay("shipworm-user", me, SHIPWORM_USER_EXTRA, me, quick, &h, say)?;
        file_relay(runs, "shipworm-user", u);
    }
    if miredo {
        let h = hints_of(runs, "miredo");
        let m = measure_relay("miredo", &Impl::Miredo, "", me, quick, &h, say)?;
        file_relay(runs, "miredo", m);
    }
    let k = measure_kernel(quick, &hints_of(runs, "kernel"), say)?;
    runs.entry("kernel").or_default().push(k);
    Ok(())
}

/// The end-to-end chains, rounds of each, alternately.
fn end_to_end(me: &Impl, quick: bool, say: &mut dyn FnMut(&str)) -> Result<Vec<EndToEnd>, Failure> {
    let bytes = e2e_bytes(quick);
    let chains = chains(me);
    let mut e2e: Vec<EndToEnd> = chains
        .iter()
        .map(|(name, _)| EndToEnd {
            name,
            qualify_secs: vec![],
            ping_ms: vec![],
            native_ms: vec![],
            tcp: Default::default(),
            tcp_streams: Default::default(),
            udp: Default::default(),
        })
        .collect();
    let rounds_e2e = e2e_rounds(quick);
    for round in 0..rounds_e2e {
        for ((name, imp), e) in chains.iter().zip(&mut e2e) {
            // Each round's round trip, and the same path's without the tunnel in the
            // same lab: the added time's spread over the rounds.
            let (lab, o) = chain_lab(me, imp, bytes, e2e_pings(quick))?;
            let (out, back) = e2e_tcp(&lab, o.address, bytes)?;
            let (out4, back4) = e2e_tcp_streams(&lab, o.address, bytes)?;
            let hint = |v: &[f64]| (!v.is_empty()).then(|| median(v) as u64);
            let (up, down) = e2e_udp(&lab, o.address, [hint(&e.udp.0), hint(&e.udp.1)], quick)?;
            if !quick {
                e.native_ms.push(native_round_trip(&lab)?);
            }
            drop(lab);
            e.ping_ms.push(o.ping_out.steady_median_ms().unwrap_or(f64::NAN));
            e.qualify_secs.push(o.qualify_secs);
            e.tcp.0.extend(out);
            e.tcp.1.extend(back);
            e.tcp_streams.0.push(out4);
            e.tcp_streams.1.push(back4);
            let rates = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
            let (up_s, down_s) = (rates(&up), rates(&down));
            e.udp.0.extend(up);
            e.udp.1.extend(down);
            say(&format!(
                "  {name} ({}/{rounds_e2e}): TCP client→native {:.0}, {:.0} Mbit/s, native→client {:.0}, {:.0} Mbit/s; ×{TCP_STREAMS} {out4:.0} and {back4:.0} Mbit/s; UDP client→native {up_s} pkt/s, native→client {down_s} pkt/s",
                round + 1,
                out[0],
                out[1],
                back[0],
                back[1]
            ));
        }
    }
    Ok(e2e)
}

/// Whether Debian's Miredo is installed (without it the bench measures shipworm and the
/// kernel only).
fn miredo_installed() -> bool {
    std::path::Path::new("/usr/sbin/miredo").exists()
}

/// The chains measured end to end: shipworm's, and Miredo's where installed.
fn chains(me: &Impl) -> Vec<(&'static str, Impl)> {
    let mut chains = vec![("shipworm", me.clone())];
    if miredo_installed() {
        chains.push(("miredo", Impl::Miredo));
    }
    chains
}

/// A client and relay chain of `imp` (shipworm's server) behind a port-restricted NAT,
/// qualified by the scenario (`pings` echoes each way, a TCP transfer of `bytes` each
/// way) and set up as the benchmark measures it: the buffers the relays had alone,
/// and the relay's and the client's hosts sharing the core the relays had alone.
pub(crate) fn chain_lab(
    me: &Impl,
    imp: &Impl,
    bytes: usize,
    pings: u32,
) -> Result<(shipworm_lab::Lab, scenario::Outcome), Failure> {
    let s = Scenario {
        nat: NatKind::PortRestricted,
        server: me.clone(),
        relay: imp.clone(),
        client: imp.clone(),
        transfer_bytes: bytes,
        pings,
        keep_on_failure: false,
        first: Side::Client,
        // The relay forwards as the relays above were measured (`--forward`).
        shipworm_extra: if forwards_through_stack() { "KernelForward stack\n" } else { "" },
        narrow_wan: None,
        software_sums: shipworm_lab::SoftwareSums::None,
    };
    let (lab, o) = scenario::run(&s, &mut |_| {}).map_err(lab_err)?;
    equalize(&lab.ns("rly"), Some(RELAY_PORT), DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
    equalize(&lab.clients[0].ns, None, DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
    cpus::pin_host(&lab.ns("rly")).map_err(Failure::runtime)?;
    cpus::pin_host(&lab.clients[0].ns).map_err(Failure::runtime)?;
    Ok((lab, o))
}

/// The end-to-end chains' TCP alone, `--rounds` rounds of shipworm's and Miredo's
/// (where installed) alternately, `bytes` a transfer: for work on the chain's figures
/// without the whole benchmark's time. Prints each round's figures.
pub(crate) fn chains_tcp(args: &crate::BenchArgs, bytes: usize) -> Result<(), Failure> {
    let me = Impl::Shipworm(shipworm_binary(args)?);
    if cpus::available() {
        cpus::pin_traffic().map_err(Failure::runtime)?;
    }
    let chains = chains(&me);
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    for round in 1..=rounds {
        for (name, imp) in &chains {
            // The scenario's own check moves little: the transfers measured are ours.
            let (lab, o) = chain_lab(&me, imp, e2e_bytes(true), 3)?;
            let (out, back) = e2e_tcp(&lab, o.address, bytes)?;
            println!(
                "{name} ({round}/{rounds}): TCP client→native {:.0}, {:.0} Mbit/s; native→client {:.0}, {:.0} Mbit/s",
                out[0], out[1], back[0], back[1]
            );
        }
    }
    Ok(())
}

/// The `shipworm` binary measured: `--shipworm`, or the one built beside this program.
pub(crate) fn shipworm_binary(args: &crate::BenchArgs) -> Result<std::path::PathBuf, Failure> {
    let path = match &args.shipworm {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| Failure::runtime(format!("cannot find this program's path: {e}")))?
            .with_file_name("shipworm"),
    };
    if !path.is_file() {
        return Err(Failure::runtime(format!(
            "no shipworm binary at {}: build it (cargo build --release) or name it with --shipworm PATH",
            path.display()
        )));
    }
    crate::builds::check(Some(&path), args.quick || args.any_build)?;
    Ok(path)
}

/// The chain's trip without the tunnel ([`EndToEnd::native_ms`]), ms: 20 echoes each,
/// steady medians.
fn native_round_trip(lab: &shipworm_lab::Lab) -> Result<f64, Failure> {
    use shipworm_lab::traffic::{ping, ping4};
    let median = |r: shipworm_lab::Result<shipworm_lab::traffic::PingResult>, what: &str| {
        r.map_err(lab_err)?
            .steady_median_ms()
            .ok_or_else(|| Failure::runtime(format!("native reference: no answer {what}")))
    };
    let rly = lab.ns("rly");
    let v4 = median(ping4(&lab.clients[0].ns, shipworm_lab::RELAY_V4, 20, 2), "from the relay host over IPv4")?;
    let v6 = median(ping(&rly, shipworm_lab::HOST6_V6, 20, 2), "from the native host")?;
    let lo = median(ping(&rly, std::net::Ipv6Addr::LOCALHOST, 20, 2), "from the relay host's loopback")?;
    Ok(v4 + v6 - lo)
}
