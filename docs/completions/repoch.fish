# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_repoch_global_optspecs
    string join \n root= json h/help V/version
end

function __fish_repoch_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_repoch_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_repoch_using_subcommand
    set -l cmd (__fish_repoch_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c repoch -n "__fish_repoch_needs_command" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_needs_command" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch -n "__fish_repoch_needs_command" -s V -l version -d 'Print version'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "enroll" -d 'Enroll a deployment from a TOML manifest (root, once per deployment); prints its id'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "discover" -d 'Find the old root\'s authorities on the live system and print a draft manifest'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "recover" -d 'Ask repochd to run the one recovery of DEPLOYMENT; streams each step'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "observe" -d 'Observe lineage, containment, fences, READY and the consumer executable now, and print every fact with the evidence digest. Writes nothing: a preflight check'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "status" -d 'Classify a deployment\'s epoch. Changes nothing'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "list" -d 'List enrolled deployments and their epoch state'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "checkpoint" -d 'Print the deployment\'s epoch-log checkpoint: a C2SP signed note (origin, record count, head hash) under the host issuer key, for auditors (`audit --checkpoint`). Root only; the log must verify'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "audit" -d 'Verify epoch logs and the chain between deployments, offline'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "journal" -d 'Producer journal records, for roots not written in Rust'
complete -c repoch -n "__fish_repoch_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch -n "__fish_repoch_using_subcommand enroll" -l fleet-admin-cert -d 'Establishing a fleet (a `[registry]` without `fleet_id`): an etcd administrator\'s client certificate (PEM), which writes the fleet record no host\'s credential may write. Used for that one write (and its removal if the enrollment fails), never kept. Root\'s file, in root\'s directories' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand enroll" -l fleet-admin-key -d 'The key of `--fleet-admin-cert` (PEM; root\'s, 0600)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand enroll" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand enroll" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand enroll" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l pid -d 'A process of the old root (it and its descendants are followed)' -r
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l cgroup -d 'A cgroup v2 path the old root runs in, from the hierarchy\'s root (`/system.slice/x.service`); every process in it and below' -r
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l unit -d 'A systemd unit of the old root (its `ControlGroup=`)' -r
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l engine -d 'Where a container engine listens (`docker=unix:///run/docker.sock`; docker, podman or containerd, each once): asked what it says of the containers found (the systemd unit its label names as running one, its restart policy). Each engine not given is asked at its default socket' -r
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand discover" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand discover" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch -n "__fish_repoch_using_subcommand recover" -l approve-ready -d 'The sha256 of the READY file you approve (hex). Without it, the first observation\'s digest is shown and used' -r
complete -c repoch -n "__fish_repoch_using_subcommand recover" -l consumer-wait -d 'How long repochd waits for the consumer to connect, in seconds (1..=3600)' -r
complete -c repoch -n "__fish_repoch_using_subcommand recover" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand recover" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand recover" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand observe" -l approve-ready -d 'The READY sha256 to check against (hex)' -r
complete -c repoch -n "__fish_repoch_using_subcommand observe" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand observe" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand observe" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch -n "__fish_repoch_using_subcommand status" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand status" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand status" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand list" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand list" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand list" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand checkpoint" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand checkpoint" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand checkpoint" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l issuer-key -d 'The host issuer public key (default: the one under --root or /etc/repoch)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l checkpoint -d 'A checkpoint taken earlier (`repoch checkpoint`, or the one `repoch-consume` keeps beside its grant)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l registry -d 'A TOML file with the fleet registry\'s `[registry]` table (a deployment\'s manifest will do): list every fleet deployment under its prefix and the host whose claim used its epoch, count the host records (--json lists them), any number of keys in bounded memory, and compare each PATH\'s log with the registry: a log that does not hold the claim the registry recorded for it (rolled back or replaced), or that consumed with a token the registry does not hold, is reported with the evidence pair (exit 5)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l jobs -d 'Verify with N threads, each a share of the logs (default: one per CPU, at most 64). The reports are the same, in the order given, for any N' -r
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l batch -d 'Verify the signatures in batches first (ed25519 batch verification): the same verdicts, as each signature a batch cannot prove equal to strict verification\'s is verified strictly (docs/AUDITOR.md, "Batch verification")'
complete -c repoch -n "__fish_repoch_using_subcommand audit" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand audit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -f -a "keygen" -d 'Create a producer key pair: KEYFILE (secret, 0600) and KEYFILE.pub'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -f -a "append" -d 'Append one signed record to the producer journal (fsynced before exit 0)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and not __fish_seen_subcommand_from keygen append help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from keygen" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from keygen" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from keygen" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -l journal -d 'The journal file' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -l key -d 'The producer\'s secret key file' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -l deployment -d 'Deployment id or unique prefix (the journal\'s genesis must name it)' -r
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -l json -d 'Machine-readable output: one JSON object per line on stdout'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -s h -l help -d 'Print help'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -f -a "root-start" -d 'The root started (records this process\'s parent pid unless --pid)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -f -a "op-begin" -d 'An operation begins; prints its op id (use it with op-end)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -f -a "op-end" -d 'An operation ended: succeeded, failed or unknown'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -f -a "root-stop" -d 'The root stopped cleanly'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from append" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from help" -f -a "keygen" -d 'Create a producer key pair: KEYFILE (secret, 0600) and KEYFILE.pub'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from help" -f -a "append" -d 'Append one signed record to the producer journal (fsynced before exit 0)'
complete -c repoch -n "__fish_repoch_using_subcommand journal; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "enroll" -d 'Enroll a deployment from a TOML manifest (root, once per deployment); prints its id'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "discover" -d 'Find the old root\'s authorities on the live system and print a draft manifest'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "recover" -d 'Ask repochd to run the one recovery of DEPLOYMENT; streams each step'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "observe" -d 'Observe lineage, containment, fences, READY and the consumer executable now, and print every fact with the evidence digest. Writes nothing: a preflight check'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "status" -d 'Classify a deployment\'s epoch. Changes nothing'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "list" -d 'List enrolled deployments and their epoch state'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "checkpoint" -d 'Print the deployment\'s epoch-log checkpoint: a C2SP signed note (origin, record count, head hash) under the host issuer key, for auditors (`audit --checkpoint`). Root only; the log must verify'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "audit" -d 'Verify epoch logs and the chain between deployments, offline'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "journal" -d 'Producer journal records, for roots not written in Rust'
complete -c repoch -n "__fish_repoch_using_subcommand help; and not __fish_seen_subcommand_from enroll discover recover observe status list checkpoint audit journal help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c repoch -n "__fish_repoch_using_subcommand help; and __fish_seen_subcommand_from journal" -f -a "keygen" -d 'Create a producer key pair: KEYFILE (secret, 0600) and KEYFILE.pub'
complete -c repoch -n "__fish_repoch_using_subcommand help; and __fish_seen_subcommand_from journal" -f -a "append" -d 'Append one signed record to the producer journal (fsynced before exit 0)'
