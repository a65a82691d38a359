complete -c repochd -l root -d 'Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo)' -r -F
complete -c repochd -l log -d 'Log filter (tracing EnvFilter syntax), e.g. `info` or `repoch_daemon=debug`' -r
complete -c repochd -l config -d 'Limits and waits from a TOML file (tables [limits] and [waits]; every key, its default and range: docs/OPERATOR.md, "Configuring repochd"). An invalid file is refused at start, naming the key (exit 64)' -r -F
complete -c repochd -s h -l help -d 'Print help (see more with \'--help\')'
complete -c repochd -s V -l version -d 'Print version'
