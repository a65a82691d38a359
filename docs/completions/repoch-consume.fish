# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_repoch_consume_global_optspecs
    string join \n json h/help V/version
end

function __fish_repoch_consume_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_repoch_consume_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_repoch_consume_using_subcommand
    set -l cmd (__fish_repoch_consume_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -l json -d 'Machine-readable output: one JSON object on stdout'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -s V -l version -d 'Print version'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -f -a "keygen" -d 'Create a consumer key pair: KEYFILE (secret, 0600) and KEYFILE.pub; prints the public key'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -f -a "receive" -d 'Receive the grant of DEPLOYMENT\'s recovery (waits for the operator)'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -f -a "verify" -d 'Verify a persisted grant offline against the pinned issuer key; with --log, also that the epoch log extends the checkpoint kept beside the grant (GRANT.checkpoint)'
complete -c repoch-consume -n "__fish_repoch_consume_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand keygen" -l json -d 'Machine-readable output: one JSON object on stdout'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand keygen" -s h -l help -d 'Print help'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l deployment -d 'Deployment id or unique prefix (as `repoch list` prints it)' -r
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l key -d 'The consumer\'s secret key file' -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l issuer-key -d 'The host issuer\'s public key, pinned' -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l out -d 'Where to persist the grant (must not exist; a crash may leave a temporary `.NAME.PID.RANDOM.tmp` beside it, never a partial file at NAME)' -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l socket -d 'repochd\'s grant socket' -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l wait -d 'Longest wait for repochd at each step, in seconds (1..=86400)' -r
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -l json -d 'Machine-readable output: one JSON object on stdout'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand receive" -s h -l help -d 'Print help'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand verify" -l issuer-key -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand verify" -l log -d 'The deployment\'s epoch log (or a copy of it) to check against GRANT.checkpoint' -r -F
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand verify" -l json -d 'Machine-readable output: one JSON object on stdout'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand verify" -s h -l help -d 'Print help'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand help; and not __fish_seen_subcommand_from keygen receive verify help" -f -a "keygen" -d 'Create a consumer key pair: KEYFILE (secret, 0600) and KEYFILE.pub; prints the public key'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand help; and not __fish_seen_subcommand_from keygen receive verify help" -f -a "receive" -d 'Receive the grant of DEPLOYMENT\'s recovery (waits for the operator)'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand help; and not __fish_seen_subcommand_from keygen receive verify help" -f -a "verify" -d 'Verify a persisted grant offline against the pinned issuer key; with --log, also that the epoch log extends the checkpoint kept beside the grant (GRANT.checkpoint)'
complete -c repoch-consume -n "__fish_repoch_consume_using_subcommand help; and not __fish_seen_subcommand_from keygen receive verify help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
