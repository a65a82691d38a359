//! The native tests that need a tool or an artifact beyond the workspace and a Debian base
//! system: a loop-mounted ext4 (`mkfs.ext4`, `losetup`), network namespaces (`ip`), a
//! systemd container (`systemd-nspawn`, a rootfs built by `mmdebstrap`), Debian's
//! `/usr/bin/python3`, Go with golang.org/x/mod's packaged sources, the Debian package
//! built from this tree. Same rules as tests/native otherwise (README.md, "Test it").
//!
//! Rust's own test harness can only ignore a test at compile time, so this binary has its
//! own (`harness = false`, libtest-mimic): each trial declares what it needs, checked when
//! the binary starts. A trial whose need is missing is reported as ignored, labelled
//! `[missing: TOOL]`, and the command that installs it is printed once to stderr (a line
//! starting `skipped, missing `, which .ci/run turns into a failure under CI). It
//! stays ignored under `--include-ignored`: it never fails for the missing tool, and never
//! reads as passed. Those trials run through a second pass of the harness, so a run that
//! skips some prints two `test result:` lines.
//!
//! A trial that needs root is declared `root`: it is ignored unless `--include-ignored`
//! (or `--ignored`) is given, like `#[ignore = "needs root"]`, and starts with
//! `require_root!()`. The hygiene test (tests/native/hygiene.rs) holds every function here
//! that calls `require_root!` to a `root` declaration.

mod abuse;
mod btrfs;
mod burn;
mod checkpoint;
mod containers;
mod containment;
mod discover;
mod disks;
mod e2e;
mod fleet;
mod fleet_keys;
mod fleet_trust;
mod identity;
mod inputs;
mod lock_kinds;
mod observers;
mod powerloss;
mod powerloss_real;
mod systemd_recovery;
mod systemd_stopping;
mod units;

use std::path::Path;

use repoch_tests_native::{debian_package, nspawn_rootfs_built};

/// What a trial needs besides the workspace's binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// A program: on `PATH`, or at this absolute path. `package` is the Debian package
    /// that provides it.
    Program {
        name: &'static str,
        package: &'static str,
    },
    /// A directory that a Debian package installs.
    Dir {
        path: &'static str,
        package: &'static str,
    },
    /// The Debian package built from this tree ([`debian_package`]).
    DebianPackage,
    /// The container's rootfs: built once under target/ by mmdebstrap
    /// (`repoch_tests_native::nspawn_rootfs`); once it is there, mmdebstrap is not needed.
    NspawnRootfs,
}

const MKFS_EXT4: Need = Need::Program {
    name: "mkfs.ext4",
    package: "e2fsprogs",
};
const LOSETUP: Need = Need::Program {
    name: "losetup",
    package: "mount",
};
const IP: Need = Need::Program {
    name: "ip",
    package: "iproute2",
};
/// Debian's interpreter (the tests run it as uid 65534, so never a per-user one).
const PYTHON3: Need = Need::Program {
    name: "/usr/bin/python3",
    package: "python3",
};
const UNSHARE: Need = Need::Program {
    name: "unshare",
    package: "util-linux",
};
const NSPAWN: Need = Need::Program {
    name: "systemd-nspawn",
    package: "systemd-container",
};
const GO: Need = Need::Program {
    name: "go",
    package: "golang-go",
};
/// The sources the independent note verifier (tests-native/go/noteverify) builds against,
/// offline.
const GO_X_MOD: Need = Need::Dir {
    path: "/usr/share/gocode/src/golang.org/x/mod/sumdb/note",
    package: "golang-golang-x-mod-dev",
};
const ETCD: &[Need] = &[
    Need::Program {
        name: "etcd",
        package: "etcd-server",
    },
    Need::Program {
        name: "etcdctl",
        package: "etcd-client",
    },
    Need::Program {
        name: "openssl",
        package: "openssl",
    },
];
const ETCD_IN_NETNS: &[Need] = &[
    Need::Program {
        name: "etcd",
        package: "etcd-server",
    },
    Need::Program {
        name: "etcdctl",
        package: "etcd-client",
    },
    Need::Program {
        name: "openssl",
        package: "openssl",
    },
    IP,
];
/// A dockerd of the test's own, its containerd, and busybox-static for the image.
const DOCKER: &[Need] = &[
    Need::Program {
        name: "dockerd",
        package: "docker.io",
    },
    Need::Program {
        name: "containerd",
        package: "containerd",
    },
    Need::Dir {
        path: "/usr/share/doc/busybox-static",
        package: "busybox-static",
    },
];
/// A containerd of the test's own, its `ctr`, and busybox-static for the root file system.
const CONTAINERD: &[Need] = &[
    Need::Program {
        name: "containerd",
        package: "containerd",
    },
    Need::Program {
        name: "ctr",
        package: "containerd",
    },
    Need::Dir {
        path: "/usr/share/doc/busybox-static",
        package: "busybox-static",
    },
];
/// A podman service of the test's own, and busybox-static for the image.
const PODMAN: &[Need] = &[
    Need::Program {
        name: "podman",
        package: "podman",
    },
    Need::Dir {
        path: "/usr/share/doc/busybox-static",
        package: "busybox-static",
    },
];
/// A dockerd and a podman service of the test's own.
const DOCKER_AND_PODMAN: &[Need] = &[
    Need::Program {
        name: "dockerd",
        package: "docker.io",
    },
    Need::Program {
        name: "containerd",
        package: "containerd",
    },
    Need::Program {
        name: "podman",
        package: "podman",
    },
    Need::Dir {
        path: "/usr/share/doc/busybox-static",
        package: "busybox-static",
    },
];
const EXT4: &[Need] = &[MKFS_EXT4, LOSETUP];
const MKFS_BTRFS: Need = Need::Program {
    name: "mkfs.btrfs",
    package: "btrfs-progs",
};
const BTRFS: &[Need] = &[MKFS_BTRFS, LOSETUP];
const CONTAINER: &[Need] = &[NSPAWN, Need::NspawnRootfs];
/// A podman of the test's own beside a real systemd in a container.
const PODMAN_IN_CONTAINER: &[Need] = &[
    NSPAWN,
    Need::NspawnRootfs,
    Need::Program {
        name: "podman",
        package: "podman",
    },
    Need::Dir {
        path: "/usr/share/doc/busybox-static",
        package: "busybox-static",
    },
];

/// The command that installs the packages, as `apt-get install` takes them.
fn apt(packages: &str) -> String {
    format!("apt-get install {packages}")
}

impl Need {
    /// What the `[missing: …]` label and the stderr line name.
    fn label(self) -> &'static str {
        match self {
            Need::Program { name, .. } => name,
            Need::Dir { path, .. } => path,
            Need::DebianPackage => "target/debian/repoch_*.deb",
            Need::NspawnRootfs => "mmdebstrap",
        }
    }

    /// The command that provides it.
    fn install(self) -> String {
        match self.package() {
            Some(package) => apt(package),
            None => "cargo install cargo-deb --locked && cargo build --release \
                 -p repoch-daemon -p repoch-cli -p repoch-consumer && cargo deb -p repoch-daemon --no-build \
                 (or set REPOCH_DEB to the package)"
                .to_owned(),
        }
    }

    /// The Debian package that provides it, if one does.
    fn package(self) -> Option<&'static str> {
        match self {
            Need::Program { package, .. } | Need::Dir { package, .. } => Some(package),
            Need::DebianPackage => None,
            Need::NspawnRootfs => Some("mmdebstrap"),
        }
    }

    fn met(self) -> bool {
        match self {
            Need::Program { name, .. } => program(name),
            Need::Dir { path, .. } => Path::new(path).is_dir(),
            Need::DebianPackage => debian_package().is_some(),
            Need::NspawnRootfs => nspawn_rootfs_built() || program("mmdebstrap"),
        }
    }
}

/// Whether `name` runs: an executable file at that path (absolute), or in a directory of
/// `PATH`.
fn program(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let runs = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        return runs(Path::new(name));
    }
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| d.is_absolute() && runs(&d.join(name)))
    })
}

/// Root: ignored unless asked for, like `#[ignore = "needs root"]`. Plain: always runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Privilege {
    Root,
    Plain,
}

#[derive(Debug)]
struct Declared {
    name: &'static str,
    privilege: Privilege,
    needs: &'static [Need],
    run: fn(),
}

/// `trial!(root|plain, module::function, NEEDS)`: the trial is named `module::function`,
/// the name it had as a `#[test]` in tests/native.
macro_rules! trial {
    (root, $f:path, $needs:expr) => {
        trial!(@ Privilege::Root, $f, $needs)
    };
    (plain, $f:path, $needs:expr) => {
        trial!(@ Privilege::Plain, $f, $needs)
    };
    (@ $p:expr, $f:path, $needs:expr) => {
        Declared {
            name: stringify!($f),
            privilege: $p,
            needs: $needs,
            run: $f,
        }
    };
}

fn declared() -> Vec<Declared> {
    vec![
        trial!(
            plain,
            fleet::the_client_creates_a_key_once_and_reads_whose_it_is,
            ETCD
        ),
        trial!(
            root,
            fleet::two_hosts_of_one_fleet_recover_once_and_the_loser_writes_nothing,
            ETCD
        ),
        trial!(
            root,
            fleet::two_hosts_recovering_at_once_with_one_stopped_at_every_barrier_grant_once,
            ETCD
        ),
        trial!(
            root,
            fleet::a_log_reverted_to_before_the_grant_is_refused_by_the_registry,
            ETCD
        ),
        trial!(
            root,
            fleet::members_killed_stopped_and_restarted_never_give_a_grant_without_the_registrys_win,
            ETCD
        ),
        trial!(
            root,
            fleet::a_successors_fencing_token_is_larger_than_its_predecessors,
            ETCD
        ),
        trial!(
            root,
            fleet::a_partition_between_repochd_and_the_majority_never_grants_without_the_registrys_win,
            ETCD_IN_NETNS
        ),
        trial!(
            root,
            fleet::a_history_of_recoveries_with_random_faults_grants_at_most_once_per_fleet_deployment,
            ETCD
        ),
        trial!(
            root,
            fleet::a_fleet_key_rewritten_before_the_dispatch_withholds_and_a_deleted_one_is_caught_by_the_audit,
            ETCD
        ),
        trial!(
            root,
            fleet::registry_credentials_others_can_write_are_refused_at_enrollment_and_at_recovery,
            ETCD
        ),
        trial!(
            root,
            fleet::a_value_planted_over_the_bound_neither_hides_a_claim_nor_blinds_the_audit,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_fleet_is_established_once_and_joined_only_by_its_id_under_its_exact_prefix,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_second_cluster_from_the_same_template_is_refused_although_its_ids_are_the_same,
            ETCD_IN_NETNS
        ),
        trial!(
            root,
            fleet_trust::a_members_data_started_alone_is_passed_over_and_never_grants,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_cluster_rebuilt_from_its_template_refuses_every_recovery_of_the_old_fleet,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_failed_enrollment_leaves_no_record_in_the_registry,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_fleet_established_after_a_rebuild_with_a_floor_gives_a_larger_token,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_connection_dropped_after_the_claim_is_dialled_again_and_granted,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_relay_switched_to_a_twin_mid_recovery_never_grants,
            ETCD_IN_NETNS
        ),
        trial!(
            root,
            fleet_trust::a_fleet_record_planted_with_a_minority_of_the_members_cannot_be_joined,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_claim_an_etcd_writer_planted_naming_a_host_is_reported_forged_not_a_rollback,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::unusable_registry_credentials_are_named_at_enrollment_and_at_recovery,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_full_cluster_refuses_the_recovery_before_its_intent_and_it_is_granted_once_cleared,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::planted_keys_neither_blind_the_audit_nor_block_an_enrollment_and_print_escaped,
            ETCD
        ),
        trial!(root, containers::containers_are_checked_at_enrollment, &[]),
        trial!(
            root,
            containers::a_podman_container_its_restart_at_boot_would_start_is_refused_until_created_without_it,
            PODMAN
        ),
        trial!(
            root,
            containers::a_podman_container_a_systemd_unit_runs_is_refused_unless_its_unit_is_named,
            PODMAN
        ),
        trial!(
            root,
            containers::a_podman_container_started_while_repochd_waits_or_its_service_gone_is_never_granted,
            PODMAN
        ),
        trial!(
            root,
            containers::podman_s_event_stream_is_caught_up_by_a_volume_of_repochs_own,
            PODMAN
        ),
        trial!(
            root,
            containers::a_docker_container_its_engine_could_start_again_is_refused_until_its_policy_is_no,
            DOCKER
        ),
        trial!(
            root,
            containers::a_containerd_container_its_restart_monitor_would_start_is_refused_until_unlabelled_and_its_task_deleted,
            CONTAINERD
        ),
        trial!(
            root,
            containers::a_containerd_container_started_while_repochd_waits_or_containerd_gone_is_never_granted,
            CONTAINERD
        ),
        trial!(
            root,
            containers::a_docker_container_started_or_recreated_while_repochd_waits_is_never_granted,
            DOCKER
        ),
        trial!(
            root,
            containers::an_unreachable_docker_engine_refuses_the_recovery_with_nothing_written,
            DOCKER
        ),
        trial!(
            root,
            containers::containers_the_manifest_does_not_name_do_not_matter,
            DOCKER
        ),
        trial!(
            root,
            containers::a_docker_short_id_another_container_took_as_its_name_is_refused,
            DOCKER
        ),
        trial!(
            root,
            containers::a_podman_short_id_another_container_took_as_its_name_is_refused,
            PODMAN
        ),
        trial!(
            root,
            containers::a_container_renamed_away_before_the_first_observation_is_still_the_one_judged,
            DOCKER
        ),
        trial!(
            root,
            containers::a_short_name_only_a_bystanders_id_begins_with_pins_nothing,
            DOCKER
        ),
        trial!(
            root,
            discover::a_containers_process_in_a_child_of_its_cgroup_is_still_the_containers,
            DOCKER
        ),
        trial!(
            root,
            discover::a_process_an_exec_session_started_in_a_named_container_is_cross_checked,
            DOCKER
        ),
        trial!(
            root,
            discover::a_fake_shim_in_a_look_alike_container_cgroup_is_no_named_containers,
            DOCKER
        ),
        trial!(
            root,
            containers::a_process_in_a_stopped_containers_cgroup_is_a_running_container,
            DOCKER_AND_PODMAN
        ),
        trial!(
            root,
            discover::a_docker_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named,
            DOCKER
        ),
        trial!(
            root,
            discover::a_podman_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named,
            PODMAN
        ),
        trial!(
            root,
            discover::a_containerd_container_its_restart_monitor_starts_is_discovered_and_refused_until_named,
            CONTAINERD
        ),
        trial!(
            root,
            containers::a_bystander_whose_id_begins_with_the_named_containers_name_changes_nothing,
            PODMAN
        ),
        trial!(
            root,
            fleet_trust::a_fleet_record_rewritten_or_huge_values_planted_never_hide_a_replaced_claim,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::more_planted_keys_than_any_bound_neither_blind_the_audit_nor_grow_its_memory,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::an_interrupted_recover_claims_nothing_and_another_host_recovers_the_fleet,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_replaced_member_keeps_the_fleet_and_a_second_replaced_is_a_mismatch,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_copy_of_the_fleet_one_members_key_serves_is_outvoted_by_the_other_members,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_host_listing_fewer_than_a_majority_of_the_members_is_refused_at_enrollment,
            ETCD
        ),
        trial!(
            root,
            fleet_trust::a_claim_and_host_record_copied_from_another_fleet_of_the_same_name_are_forged,
            ETCD
        ),
        trial!(
            root,
            fleet_keys::a_credential_that_could_write_what_no_hosts_may_is_refused_before_the_intent,
            ETCD
        ),
        trial!(
            root,
            fleet_keys::no_host_credential_can_plant_copy_or_replay_a_fleet_record,
            ETCD
        ),
        trial!(
            root,
            fleet_keys::a_cluster_rebuilt_from_its_template_never_accepts_the_old_fleet_again,
            ETCD
        ),
        trial!(
            root,
            fleet_keys::a_template_twin_holding_the_copied_fleet_record_is_never_joined,
            ETCD_IN_NETNS
        ),
        trial!(
            root,
            fleet_keys::a_claim_copied_to_another_key_is_planted_and_never_makes_the_audit_consistent,
            ETCD
        ),
        trial!(
            root,
            lock_kinds::a_lock_of_every_kind_on_a_fence_is_fence_busy_naming_its_holder,
            &[PYTHON3]
        ),
        trial!(
            root,
            lock_kinds::no_process_can_take_a_lock_of_any_kind_on_a_fence_repochd_holds,
            &[PYTHON3]
        ),
        trial!(
            root,
            lock_kinds::a_write_lease_on_a_fence_is_fence_busy_naming_its_holder,
            &[PYTHON3]
        ),
        trial!(
            root,
            btrfs::a_fence_on_a_btrfs_subvolume_is_held_granted_and_its_holder_named,
            BTRFS
        ),
        trial!(
            root,
            burn::another_user_acting_at_random_moments_of_many_recoveries_never_denies_nor_burns_one,
            &[UNSHARE]
        ),
        trial!(
            root,
            abuse::a_flood_of_hostile_connections_from_another_user_neither_delays_nor_touches_a_real_recovery,
            &[PYTHON3]
        ),
        trial!(
            root,
            abuse::another_user_holding_many_descriptors_cannot_deny_a_recovery,
            &[PYTHON3]
        ),
        trial!(
            root,
            abuse::another_user_parking_more_processes_than_a_walk_once_allowed_cannot_deny_a_recovery,
            &[PYTHON3]
        ),
        trial!(
            root,
            abuse::another_user_with_a_thousand_threads_sharing_many_descriptors_cannot_deny_a_recovery,
            &[PYTHON3]
        ),
        trial!(
            root,
            checkpoint::a_checkpoint_verifies_with_go_sumdb_note_and_a_tampered_one_does_not,
            &[GO, GO_X_MOD]
        ),
        trial!(
            plain,
            checkpoint::every_note_is_judged_as_go_sumdb_note_judges_it,
            &[GO, GO_X_MOD]
        ),
        trial!(
            root,
            containment::a_unix_listener_bound_in_another_network_namespace_is_listener_present,
            &[IP]
        ),
        trial!(
            root,
            containment::a_listener_in_a_namespace_no_process_is_in_is_found_by_connecting,
            &[PYTHON3]
        ),
        trial!(
            root,
            containment::a_network_namespace_the_observer_cannot_enter_is_still_listener_present,
            &[IP]
        ),
        trial!(
            root,
            containment::a_datagram_socket_bound_to_the_enrolled_path_is_listener_present,
            &[PYTHON3]
        ),
        trial!(
            root,
            containment::a_socket_bound_in_a_namespace_no_task_is_in_and_listening_later_is_refused,
            &[PYTHON3]
        ),
        trial!(
            root,
            disks::a_full_disk_at_each_append_is_uncertain_leaves_the_log_as_it_was_and_stops_issuing,
            EXT4
        ),
        trial!(
            root,
            disks::a_dead_disk_at_each_append_is_uncertain_leaves_the_log_as_it_was_and_stops_issuing,
            EXT4
        ),
        trial!(
            root,
            disks::a_full_disk_never_leaves_a_partial_record,
            EXT4
        ),
        trial!(
            root,
            disks::an_enrollment_whose_journal_cannot_be_written_leaves_no_journal,
            EXT4
        ),
        trial!(
            root,
            e2e::a_failed_append_is_uncertain_never_retried_and_repochd_stops_issuing,
            EXT4
        ),
        trial!(
            root,
            identity::a_store_deleted_and_recreated_on_the_same_inode_number_is_store_replaced,
            EXT4
        ),
        trial!(
            root,
            identity::a_fence_deleted_and_recreated_on_the_same_inode_number_is_fence_replaced,
            EXT4
        ),
        trial!(
            root,
            inputs::a_read_only_state_directory_is_refused_before_anything_is_written,
            EXT4
        ),
        trial!(
            root,
            inputs::a_journal_append_whose_write_fails_is_uncertain_exit_3,
            EXT4
        ),
        trial!(
            root,
            observers::tcp_and_udp_ports_bound_in_a_network_namespace_are_listener_present,
            &[IP]
        ),
        trial!(
            root,
            observers::of_several_enrolled_ports_only_the_bound_one_is_listener_present,
            &[IP]
        ),
        trial!(
            root,
            powerloss::power_loss_right_after_each_fsynced_append_keeps_it,
            EXT4
        ),
        trial!(
            root,
            powerloss::power_loss_right_before_each_fsync_loses_only_the_unsynced_record,
            EXT4
        ),
        trial!(
            root,
            powerloss::power_loss_right_after_enrollment_keeps_the_deployment,
            EXT4
        ),
        trial!(
            plain,
            powerloss_real::every_issuance_barrier_has_a_power_cut_case_in_order,
            &[]
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_open_writes_nothing_and_grants_once,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_reserve_writes_nothing_and_grants_once,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_observe_writes_nothing_and_grants_once,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_connect_writes_nothing_and_grants_once,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_before_intent_writes_nothing_and_grants_once,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_intent_keeps_the_epoch_intended_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_custody_keeps_the_epoch_intended_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_the_first_final_verification_keeps_the_epoch_intended_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_the_claim_keeps_the_epoch_intended_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_consume_keeps_the_epoch_consumed_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_receipt_keeps_the_epoch_receipted_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_the_second_final_verification_keeps_the_epoch_receipted_and_refused,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_dispatch_keeps_the_receipt_the_persisted_grant_carries,
            EXT4
        ),
        trial!(
            root,
            powerloss_real::power_cut_after_the_acknowledgement_keeps_the_receipt_the_persisted_grant_carries,
            EXT4
        ),
        trial!(
            root,
            systemd_recovery::a_recovery_through_socket_activation_under_the_shipped_unit,
            CONTAINER
        ),
        trial!(
            root,
            discover::a_timer_and_an_activating_socket_are_discovered_and_refused_at_enrollment_until_named,
            CONTAINER
        ),
        trial!(
            root,
            units::a_unit_stopped_with_a_process_left_in_its_cgroup_is_active,
            CONTAINER
        ),
        trial!(
            root,
            units::timers_templates_and_another_cgroup_view_are_held_not_skipped,
            CONTAINER
        ),
        trial!(
            root,
            discover::a_podman_container_its_generated_unit_runs_is_discovered_and_held_by_that_unit,
            PODMAN_IN_CONTAINER
        ),
        trial!(
            root,
            systemd_recovery::a_recovery_from_the_installed_package,
            &[NSPAWN, Need::NspawnRootfs, Need::DebianPackage]
        ),
        trial!(
            root,
            systemd_stopping::stop_and_restart_at_every_barrier_under_systemd,
            CONTAINER
        ),
        trial!(
            root,
            systemd_stopping::an_upgrade_mid_recovery_refuses_it_daemon_stopping_and_the_next_one_grants,
            &[NSPAWN, Need::NspawnRootfs, Need::DebianPackage]
        ),
        trial!(
            root,
            units::units_masked_active_reload_pending_and_absent_systemd,
            CONTAINER
        ),
        trial!(
            root,
            units::each_units_state_is_named_exactly_in_one_observation,
            CONTAINER
        ),
        trial!(
            root,
            units::a_service_that_runs_the_old_roots_executable_must_be_named,
            CONTAINER
        ),
        trial!(
            root,
            units::a_template_is_held_whole_masked_with_every_instance_inactive,
            CONTAINER
        ),
    ]
}

/// A panic in the trial is its failure (libtest-mimic catches it and reports its message).
/// Each trial that ends prints its wall time on stderr (`trial NAME: 12.3 s`): the run's
/// budget (docs/ACCEPTANCE.md, "CI's time") is read from them.
fn trial(d: &Declared) -> libtest_mimic::Trial {
    let (run, name) = (d.run, d.name);
    libtest_mimic::Trial::test(d.name, move || {
        let started = std::time::Instant::now();
        run();
        eprintln!("trial {name}: {:.1} s", started.elapsed().as_secs_f64());
        Ok(())
    })
    .with_ignored_flag(d.privilege == Privilege::Root)
}

pub(crate) use repoch_tests_native::{assert_holds, assert_refused};

/// Options of the harness's command line that take a value in the next argument.
const VALUED_OPTIONS: &[&str] = &[
    "--test-threads",
    "--logfile",
    "--skip",
    "--color",
    "--format",
    "-Z",
];

/// The command line, and its filters: std's harness takes any number of them (`cargo
/// test -- a b` gives both to every test binary), libtest-mimic one. With more than one,
/// they are matched here (a trial runs if any matches) and the harness gets none.
fn arguments() -> (libtest_mimic::Arguments, Vec<String>) {
    let argv: Vec<String> = std::env::args().collect();
    let mut rest = vec![argv[0].clone()];
    let mut filters = Vec::new();
    let mut it = argv.into_iter().skip(1);
    while let Some(a) = it.next() {
        if VALUED_OPTIONS.contains(&a.as_str()) {
            rest.push(a);
            rest.extend(it.next());
        } else if a.starts_with('-') {
            rest.push(a);
        } else {
            filters.push(a);
        }
    }
    if filters.len() == 1 {
        rest.append(&mut filters);
    }
    let mut args = libtest_mimic::Arguments::from_iter(rest);
    // As std's harness does: `--test-threads`, else RUST_TEST_THREADS (.cargo/config.toml
    // sets it for the workspace: README.md, "Test it"), else one thread a core.
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|&n: &usize| n > 0);
    }
    (args, filters)
}

/// Whether `t` is out of every one of `filters` (never, when there are none).
fn filtered_out(
    args: &libtest_mimic::Arguments,
    filters: &[String],
    t: &libtest_mimic::Trial,
) -> bool {
    !filters.is_empty()
        && filters.iter().all(|f| {
            let mut one = args.clone();
            one.filter = Some(f.clone());
            one.is_filtered_out(t)
        })
}

fn main() -> std::process::ExitCode {
    let (args, filters) = arguments();
    let mut ready = Vec::new();
    let mut skipped = Vec::new();
    // Each missing need once, with the names of the trials it skips.
    let mut missing: Vec<(Need, Vec<&'static str>)> = Vec::new();
    for d in declared() {
        let lacking: Vec<Need> = d.needs.iter().copied().filter(|n| !n.met()).collect();
        if lacking.is_empty() {
            let t = trial(&d);
            if !filtered_out(&args, &filters, &t) {
                ready.push(t);
            }
            continue;
        }
        let labels: Vec<&str> = lacking.iter().map(|n| n.label()).collect();
        let t = trial(&d)
            .with_kind(format!("missing: {}", labels.join(", ")))
            .with_ignored_flag(true);
        if filtered_out(&args, &filters, &t) {
            continue;
        }
        if args.is_filtered_out(&t) {
            skipped.push(t);
            continue;
        }
        for n in lacking {
            match missing.iter_mut().find(|(m, _)| *m == n) {
                Some((_, names)) => names.push(d.name),
                None => missing.push((n, vec![d.name])),
            }
        }
        skipped.push(t);
    }
    let first = libtest_mimic::run(&args, ready);
    if skipped.is_empty() {
        return first.exit_code();
    }
    for (need, names) in &missing {
        eprintln!(
            "skipped, missing {}: {} test{}; install it with: {}",
            need.label(),
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            need.install()
        );
    }
    let mut packages: Vec<&str> = Vec::new();
    for p in missing.iter().filter_map(|(n, _)| n.package()) {
        if !packages.contains(&p) {
            packages.push(p);
        }
    }
    if packages.len() > 1 {
        eprintln!(
            "every missing package at once: {}",
            apt(&packages.join(" "))
        );
    }
    // Ignored whatever the arguments ask: a trial that cannot run is never run.
    let mut only_listed = args.clone();
    only_listed.include_ignored = false;
    only_listed.ignored = false;
    let second = libtest_mimic::run(&only_listed, skipped);
    if first.has_failed() || second.has_failed() {
        std::process::ExitCode::from(101)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
