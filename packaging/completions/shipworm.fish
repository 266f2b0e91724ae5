# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_shipworm_global_optspecs
    string join \n h/help V/version
end

function __fish_shipworm_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_shipworm_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_shipworm_using_subcommand
    set -l cmd (__fish_shipworm_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c shipworm -n "__fish_shipworm_needs_command" -s h -l help -d 'Print help'
complete -c shipworm -n "__fish_shipworm_needs_command" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "address" -d 'Decode a Teredo address, or encode one from its parts'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "server" -d 'Run a Teredo server (RFC 4380 §5.3) on two consecutive public IPv4 addresses'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "relay" -d 'Run a Teredo relay (RFC 4380 §5.4) or host-specific relay (§5.5)'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "client" -d 'Run a Teredo client (RFC 4380 §5.2, RFC 5991): IPv6 from behind an IPv4 NAT'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "status" -d 'Show what a running client is doing: state, address, NAT kind, server, peers, counters'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "check-config" -d 'Check a configuration file without starting anything: prints what it means, or one line naming the file, line and reason (exit status 2)'
complete -c shipworm -n "__fish_shipworm_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l server -d 'Encode: the Teredo server\'s IPv4 address' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l mapped -d 'Encode: the client\'s mapped (NAT-external) IPv4 address and port' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l random-bits -d 'Encode: the 12 RFC 5991 random bits, 0–4095 (decimal or 0x hex), or `random`. Without it the bits are zero, as an RFC 4380 client would form the address' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l prefix -d 'The Teredo prefix (a /32). Decoding accepts 2001:0::/32 and the old 3ffe:831f::/32 unless this names another; encoding uses 2001:0::/32 unless this is given' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l cone -d 'Encode: set the cone flag (deprecated by RFC 5991; only old clients set it)'
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -l json -d 'Print JSON instead of text'
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c shipworm -n "__fish_shipworm_using_subcommand address" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s c -l config -d 'Configuration file (miredo-server.conf format)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -l bind2 -d 'Secondary IPv4 address, overriding ServerBindAddress2' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s u -l user -d 'The user to run as once set up (default: shipworm, else nobody)' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s p -l pidfile -d 'Write the process id to this file (removed on a clean stop)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -l control -d 'The status socket `shipworm status` reads (default: /run/shipworm/IFACE.sock for a client or relay, /run/shipworm/server.sock for a server)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s f -l foreground -d 'Stay in the foreground (always the case; accepted for Miredo compatibility)'
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c shipworm -n "__fish_shipworm_using_subcommand server" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s c -l config -d 'Configuration file (miredo.conf format)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s u -l user -d 'The user to run as once set up (default: shipworm, else nobody)' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s p -l pidfile -d 'Write the process id to this file (removed on a clean stop)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -l control -d 'The status socket `shipworm status` reads (default: /run/shipworm/IFACE.sock for a client or relay, /run/shipworm/server.sock for a server)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s f -l foreground -d 'Stay in the foreground (always the case; accepted for Miredo compatibility)'
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c shipworm -n "__fish_shipworm_using_subcommand relay" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s c -l config -d 'Configuration file (miredo.conf format)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s u -l user -d 'The user to run as once set up (default: shipworm, else nobody)' -r
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s p -l pidfile -d 'Write the process id to this file (removed on a clean stop)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -l control -d 'The status socket `shipworm status` reads (default: /run/shipworm/IFACE.sock for a client or relay, /run/shipworm/server.sock for a server)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s f -l foreground -d 'Stay in the foreground (always the case; accepted for Miredo compatibility)'
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c shipworm -n "__fish_shipworm_using_subcommand client" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand status" -l socket -d 'The daemon\'s status socket (default: the only one in /run/shipworm)' -r -F
complete -c shipworm -n "__fish_shipworm_using_subcommand status" -l json -d 'Print the JSON document'
complete -c shipworm -n "__fish_shipworm_using_subcommand status" -s h -l help -d 'Print help'
complete -c shipworm -n "__fish_shipworm_using_subcommand status" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand check-config" -l role -d 'The role the file configures (default: told by its directives, e.g. ServerBindAddress makes a server file, RelayType or ServerAddress a miredo.conf)' -r -f -a "server\t'miredo-server.conf'
miredo\t'miredo.conf (client or relay, as its RelayType says)'"
complete -c shipworm -n "__fish_shipworm_using_subcommand check-config" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c shipworm -n "__fish_shipworm_using_subcommand check-config" -s V -l version -d 'Print version'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "address" -d 'Decode a Teredo address, or encode one from its parts'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "server" -d 'Run a Teredo server (RFC 4380 §5.3) on two consecutive public IPv4 addresses'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "relay" -d 'Run a Teredo relay (RFC 4380 §5.4) or host-specific relay (§5.5)'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "client" -d 'Run a Teredo client (RFC 4380 §5.2, RFC 5991): IPv6 from behind an IPv4 NAT'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "status" -d 'Show what a running client is doing: state, address, NAT kind, server, peers, counters'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "check-config" -d 'Check a configuration file without starting anything: prints what it means, or one line naming the file, line and reason (exit status 2)'
complete -c shipworm -n "__fish_shipworm_using_subcommand help; and not __fish_seen_subcommand_from address server relay client status check-config help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
