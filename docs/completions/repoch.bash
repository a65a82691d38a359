_repoch() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="repoch"
                ;;
            repoch,audit)
                cmd="repoch__subcmd__audit"
                ;;
            repoch,checkpoint)
                cmd="repoch__subcmd__checkpoint"
                ;;
            repoch,discover)
                cmd="repoch__subcmd__discover"
                ;;
            repoch,enroll)
                cmd="repoch__subcmd__enroll"
                ;;
            repoch,help)
                cmd="repoch__subcmd__help"
                ;;
            repoch,journal)
                cmd="repoch__subcmd__journal"
                ;;
            repoch,list)
                cmd="repoch__subcmd__list"
                ;;
            repoch,observe)
                cmd="repoch__subcmd__observe"
                ;;
            repoch,recover)
                cmd="repoch__subcmd__recover"
                ;;
            repoch,status)
                cmd="repoch__subcmd__status"
                ;;
            repoch__subcmd__help,audit)
                cmd="repoch__subcmd__help__subcmd__audit"
                ;;
            repoch__subcmd__help,checkpoint)
                cmd="repoch__subcmd__help__subcmd__checkpoint"
                ;;
            repoch__subcmd__help,discover)
                cmd="repoch__subcmd__help__subcmd__discover"
                ;;
            repoch__subcmd__help,enroll)
                cmd="repoch__subcmd__help__subcmd__enroll"
                ;;
            repoch__subcmd__help,help)
                cmd="repoch__subcmd__help__subcmd__help"
                ;;
            repoch__subcmd__help,journal)
                cmd="repoch__subcmd__help__subcmd__journal"
                ;;
            repoch__subcmd__help,list)
                cmd="repoch__subcmd__help__subcmd__list"
                ;;
            repoch__subcmd__help,observe)
                cmd="repoch__subcmd__help__subcmd__observe"
                ;;
            repoch__subcmd__help,recover)
                cmd="repoch__subcmd__help__subcmd__recover"
                ;;
            repoch__subcmd__help,status)
                cmd="repoch__subcmd__help__subcmd__status"
                ;;
            repoch__subcmd__help__subcmd__journal,append)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__append"
                ;;
            repoch__subcmd__help__subcmd__journal,keygen)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__keygen"
                ;;
            repoch__subcmd__help__subcmd__journal__subcmd__append,op-begin)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__op__subcmd__begin"
                ;;
            repoch__subcmd__help__subcmd__journal__subcmd__append,op-end)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__op__subcmd__end"
                ;;
            repoch__subcmd__help__subcmd__journal__subcmd__append,root-start)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__root__subcmd__start"
                ;;
            repoch__subcmd__help__subcmd__journal__subcmd__append,root-stop)
                cmd="repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__root__subcmd__stop"
                ;;
            repoch__subcmd__journal,append)
                cmd="repoch__subcmd__journal__subcmd__append"
                ;;
            repoch__subcmd__journal,help)
                cmd="repoch__subcmd__journal__subcmd__help"
                ;;
            repoch__subcmd__journal,keygen)
                cmd="repoch__subcmd__journal__subcmd__keygen"
                ;;
            repoch__subcmd__journal__subcmd__append,help)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help"
                ;;
            repoch__subcmd__journal__subcmd__append,op-begin)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__op__subcmd__begin"
                ;;
            repoch__subcmd__journal__subcmd__append,op-end)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__op__subcmd__end"
                ;;
            repoch__subcmd__journal__subcmd__append,root-start)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__root__subcmd__start"
                ;;
            repoch__subcmd__journal__subcmd__append,root-stop)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__root__subcmd__stop"
                ;;
            repoch__subcmd__journal__subcmd__append__subcmd__help,help)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__help"
                ;;
            repoch__subcmd__journal__subcmd__append__subcmd__help,op-begin)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__op__subcmd__begin"
                ;;
            repoch__subcmd__journal__subcmd__append__subcmd__help,op-end)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__op__subcmd__end"
                ;;
            repoch__subcmd__journal__subcmd__append__subcmd__help,root-start)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__root__subcmd__start"
                ;;
            repoch__subcmd__journal__subcmd__append__subcmd__help,root-stop)
                cmd="repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__root__subcmd__stop"
                ;;
            repoch__subcmd__journal__subcmd__help,append)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__append"
                ;;
            repoch__subcmd__journal__subcmd__help,help)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__help"
                ;;
            repoch__subcmd__journal__subcmd__help,keygen)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__keygen"
                ;;
            repoch__subcmd__journal__subcmd__help__subcmd__append,op-begin)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__op__subcmd__begin"
                ;;
            repoch__subcmd__journal__subcmd__help__subcmd__append,op-end)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__op__subcmd__end"
                ;;
            repoch__subcmd__journal__subcmd__help__subcmd__append,root-start)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__root__subcmd__start"
                ;;
            repoch__subcmd__journal__subcmd__help__subcmd__append,root-stop)
                cmd="repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__root__subcmd__stop"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        repoch)
            opts="-h -V --root --json --help --version enroll discover recover observe status list checkpoint audit journal help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__audit)
            opts="-h --issuer-key --checkpoint --registry --batch --jobs --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --issuer-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --checkpoint)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --registry)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --jobs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__checkpoint)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__discover)
            opts="-h --pid --cgroup --unit --engine --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --unit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__enroll)
            opts="-h --fleet-admin-cert --fleet-admin-key --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --fleet-admin-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fleet-admin-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help)
            opts="enroll discover recover observe status list checkpoint audit journal help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__audit)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__checkpoint)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__discover)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__enroll)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal)
            opts="keygen append"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__append)
            opts="root-start op-begin op-end root-stop"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__op__subcmd__begin)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__op__subcmd__end)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__root__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__append__subcmd__root__subcmd__stop)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__journal__subcmd__keygen)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__observe)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__recover)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__help__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal)
            opts="-h --root --json --help keygen append help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append)
            opts="-h --journal --key --deployment --root --json --help root-start op-begin op-end root-stop help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --journal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deployment)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help)
            opts="root-start op-begin op-end root-stop help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__op__subcmd__begin)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__op__subcmd__end)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__root__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__help__subcmd__root__subcmd__stop)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__op__subcmd__begin)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__op__subcmd__end)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__root__subcmd__start)
            opts="-h --pid --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__append__subcmd__root__subcmd__stop)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help)
            opts="keygen append help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__append)
            opts="root-start op-begin op-end root-stop"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__op__subcmd__begin)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__op__subcmd__end)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__root__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__append__subcmd__root__subcmd__stop)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 5 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__help__subcmd__keygen)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__journal__subcmd__keygen)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__list)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__observe)
            opts="-h --approve-ready --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --approve-ready)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__recover)
            opts="-h --approve-ready --consumer-wait --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --approve-ready)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --consumer-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        repoch__subcmd__status)
            opts="-h --root --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _repoch -o nosort -o bashdefault -o default repoch
else
    complete -F _repoch -o bashdefault -o default repoch
fi
