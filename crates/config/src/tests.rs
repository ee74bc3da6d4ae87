use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn defaults_file_env_layering() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.toml");
    std::fs::write(
        &f,
        "listen = \"0.0.0.0:9000\"\ngpu_mode = \"none\"\n[[gpus]]\nuuid = \"GPU-fake-0\"\nmodel = \"H200\"\nmemory = \"141GiB\"\ndevice = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    let c = Config::load(Some(&f), env(&[("GPUHUB_LISTEN", "127.0.0.1:7000"), ("HOME", "/x")])).unwrap();
    assert_eq!(c.listen.port(), 7000);
    assert_eq!(c.gpu_mode, GpuMode::None);
    assert_eq!(c.gpus[0].memory, gpuhub_core::Bytes(141 << 30));
    assert_eq!(c.data_dir, PathBuf::from("./gpuhub-data"));
    assert!(c.effective_database_url().starts_with("sqlite://./gpuhub-data/"));
    assert_eq!(c.scheduler.policy, gpuhub_sched::Policy::default());
    assert!(!c.scheduler.preemption.enabled);
}

#[test]
fn scheduler_section() {
    let c = Config::from_toml(
        "[scheduler]\npolicy = \"bestfit\"\nbackfill = \"off\"\n[[scheduler.queues]]\nname = \"vision\"\nweight = 2.0\n",
    )
    .unwrap();
    assert_eq!(c.scheduler.policy, gpuhub_sched::Policy::BestFit);
    assert_eq!(c.scheduler.queues[0].name, "vision");
    let c = Config::load(None, env(&[("GPUHUB_SCHEDULER_POLICY", "spread")])).unwrap();
    assert_eq!(c.scheduler.policy, gpuhub_sched::Policy::Spread);
    assert!(Config::load(None, env(&[("GPUHUB_SCHEDULER_POLICY", "magic")])).is_err());
}

#[test]
fn unknown_variables_are_refused_and_every_setting_is_read_and_documented() {
    let e = Config::load(None, env(&[("GPUHUB_LISTN", "127.0.0.1:7000")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_LISTN") && e.contains("did you mean GPUHUB_LISTEN?"), "{e}");
    // the client's, the containers' and the scripts' variables are not the server's business
    let others: Vec<_> = env::NOT_SERVER_SETTINGS.iter().map(|v| (format!("GPUHUB_{v}"), "x".to_owned())).collect();
    Config::load(None, others).unwrap();
    let readme = include_str!("../../../README.md");
    for v in env::SERVER_VARIABLES.iter() {
        let var = format!("GPUHUB_{v}");
        // a value no setting takes: the error, if any, is about the value, never "no such setting"
        if let Err(e) = Config::load(None, [(var.clone(), "\u{1}not-a-value".to_owned())]) {
            assert!(!e.to_string().contains("no such setting"), "{var} is listed but not read: {e}");
        }
        assert!(readme.contains(&var), "{var} is not documented in README.md");
    }
}

#[test]
fn the_readme_example_is_a_valid_config() {
    let readme = include_str!("../../../README.md");
    let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let text = &readme[start..start + readme[start..].find("```").unwrap()];
    let c = Config::from_toml(text).unwrap();
    assert_eq!(c.scheduler.queues[0].name, "vision");
    assert!(c.scheduler.preemption.enabled);
    assert_eq!(c.scheduler.reservations[0].gpus, 2);
    assert_eq!(c.queue_members["vision"], ["alice", "bob"], "alice's only queue (the server charges her to it)");
    c.check_queues().unwrap();
}

/// Which queue a request is charged to is the server's (`gpuhub_server::policy`); the configuration
/// refuses members of a queue it does not have, and a queue twice.
#[test]
fn queues_and_members() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("gpuhub.toml");
    std::fs::write(
        &f,
        "[queue_members]\nvision = [\"alice\", \"bob\"]\n\
         [[scheduler.queues]]\nname = \"vision\"\nguarantee = { gpu_milli = 2000 }\n\
         [[scheduler.queues]]\nname = \"nlp\"\n",
    )
    .unwrap();
    let c = Config::load(Some(&f), env(&[])).unwrap();
    assert_eq!(c.queue_members["vision"], ["alice", "bob"]);
    assert_eq!(c.scheduler.queues[0].guarantee.gpu_milli, 2000);
    // members of a queue that is not configured, and duplicate queues, are refused at load
    std::fs::write(&f, "[queue_members]\ncv = [\"alice\"]\n[[scheduler.queues]]\nname = \"nlp\"\n").unwrap();
    let e = Config::load(Some(&f), env(&[])).unwrap_err().to_string();
    assert!(e.contains("queue_members.cv") && e.contains("configured: nlp"), "{e}");
    std::fs::write(&f, "[[scheduler.queues]]\nname = \"nlp\"\n[[scheduler.queues]]\nname = \"nlp\"\n").unwrap();
    let e = Config::load(Some(&f), env(&[])).unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
}

/// What a request may ask for is the server's (`gpuhub_server::policy`); the configuration refuses
/// classes out of range and queues or classes it does not have.
#[test]
fn priority_classes_are_checked_at_load() {
    let c = Config::from_toml(
        "[priority_classes]\nhigh = 100\nlow = -50\n[queue_priority_classes]\nvision = [\"high\"]\n\"*\" = [\"low\"]\n\
         [[scheduler.queues]]\nname = \"vision\"\n[[scheduler.queues]]\nname = \"nlp\"\n",
    )
    .unwrap();
    c.check_queues().unwrap();
    // classes and queues named must exist
    let e = Config::from_toml("[queue_priority_classes]\n\"*\" = [\"urgent\"]\n").unwrap().check_queues().unwrap_err();
    assert!(e.to_string().contains("no priority class urgent"), "{e}");
    let e = Config::from_toml("[queue_priority_classes]\ncv = [\"high\"]\n[priority_classes]\nhigh = 1\n")
        .unwrap()
        .check_queues()
        .unwrap_err();
    assert!(e.to_string().contains("no queue cv"), "{e}");
    let e = Config::from_toml("[priority_classes]\nhigh = 1001\n").unwrap().check_queues().unwrap_err();
    assert!(e.to_string().contains("priority_classes.high") && e.to_string().contains("-1000 to 1000"), "{e}");
}

#[test]
fn a_partial_user_limit_limits_only_what_it_names() {
    let c = Config::from_toml("[[scheduler.queues]]\nname = \"vision\"\nuser_limit = { gpu_milli = 2000 }\n").unwrap();
    let l = c.scheduler.queues[0].user_limit.unwrap();
    assert_eq!((l.gpu_milli, l.cpu_milli, l.memory), (2000, u64::MAX, u64::MAX));
    assert!(c.scheduler.queues[0].borrow_limit.is_none());
    assert!(Config::from_toml("[[scheduler.queues]]\nname = \"v\"\nuser_limit = { gpus = 2 }\n").is_err());
}

#[test]
fn errors_name_the_problem() {
    let e = Config::from_toml("listen = \"x\"\n").unwrap_err();
    assert!(e.contains("listen") || e.contains("invalid"), "{e}");
    let e = Config::from_toml("colour = 1\n").unwrap_err();
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_GPU_MODE", "magic")])).unwrap_err();
    assert!(e.to_string().contains("gpu_mode"), "{e}");
}

#[test]
fn limits_layering_and_checks() {
    let c = Config::default();
    assert_eq!((c.limits.max_queued_per_user, c.limits.max_workloads_per_user), (1000, 5000));
    assert_eq!((c.limits.max_command_bytes, c.limits.max_env_bytes, c.limits.max_apps), (65536, 65536, 16));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.toml");
    std::fs::write(&f, "[limits]\nmax_queued_per_user = 10\nmax_env_bytes = 100\n").unwrap();
    let c = Config::load(Some(&f), env(&[("GPUHUB_MAX_QUEUED_PER_USER", "20"), ("GPUHUB_MAX_APPS", "2")])).unwrap();
    assert_eq!(c.limits, Limits { max_queued_per_user: 20, max_env_bytes: 100, max_apps: 2, ..Limits::default() });
    let e = Config::from_toml("[limits]\nmax_jobs = 1\n").unwrap_err();
    assert!(e.contains("unknown field `max_jobs`"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_MAX_COMMAND_BYTES", "lots")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_MAX_COMMAND_BYTES"), "{e}");
    std::fs::write(&f, "[limits]\nmax_workloads_per_user = 0\n").unwrap();
    let e = Config::load(Some(&f), env(&[])).unwrap_err().to_string();
    assert!(e.contains("limits.max_workloads_per_user") && e.contains("at least 1"), "{e}");
}

#[test]
fn log_cap() {
    assert_eq!(Config::default().log_max_bytes, gpuhub_core::Bytes(100 << 20));
    let c = Config::from_toml("log_max_bytes = \"16MiB\"\n").unwrap();
    assert_eq!(c.log_max_bytes, gpuhub_core::Bytes(16 << 20));
    let c = Config::load(None, env(&[("GPUHUB_LOG_MAX_BYTES", "2GiB")])).unwrap();
    assert_eq!(c.log_max_bytes, gpuhub_core::Bytes(2 << 30));
    let e = Config::load(None, env(&[("GPUHUB_LOG_MAX_BYTES", "lots")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_LOG_MAX_BYTES"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_LOG_MAX_BYTES", "4KiB")])).unwrap_err().to_string();
    assert!(e.contains("log_max_bytes") && e.contains("1MiB"), "{e}");
}

#[test]
fn secrets_redacted() {
    let c = Config {
        database_url: Some("postgres://gpuhub:hunter2@db/gpuhub".into()),
        admin_password: Some("hunter3".into()),
        ..Config::default()
    };
    let d = format!("{c:?}");
    assert!(!d.contains("hunter2") && !d.contains("hunter3"), "{d}");
    assert!(d.contains("postgres://gpuhub:<redacted>@db/gpuhub"));
}

#[test]
fn session_hours_are_bounded() {
    for bad in ["0", "-5", "9223372036854775807"] {
        let e = Config::load(None, env(&[("GPUHUB_SESSION_HOURS", bad)])).unwrap_err();
        assert!(e.to_string().contains("session_hours"), "{bad}: {e}");
    }
}

#[test]
fn the_trial_config_is_valid_and_local() {
    let c = Config::from_toml(TRIAL_CONFIG).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.ssh_listen.to_string(), "127.0.0.1:2222");
    assert!(c.allow_any_image && c.gpus.is_empty());
    assert_eq!(c.limits.max_queued_per_user, 100);
    // its commented GPU parses too, once uncommented
    let gpus: String = TRIAL_CONFIG
        .lines()
        .skip_while(|l| !l.starts_with("# [[gpus]]"))
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_start_matches("# ")))
        .collect();
    let c = Config::from_toml(&gpus).unwrap();
    assert_eq!(c.gpus[0].sharing, Some(gpuhub_core::node::GpuSharing::Guard));
}

#[test]
fn container_disk_is_a_size_from_the_file_or_the_environment() {
    assert_eq!(Config::load(None, env(&[])).unwrap().container_disk, None, "no cap by default");
    let c = Config::from_toml("container_disk = \"20GiB\"").unwrap();
    assert_eq!(c.container_disk, Some(gpuhub_core::Bytes(20 << 30)));
    let c = Config::load(None, env(&[("GPUHUB_CONTAINER_DISK", "8GiB")])).unwrap();
    assert_eq!(c.container_disk, Some(gpuhub_core::Bytes(8 << 30)));
    assert_eq!(Config::load(None, env(&[("GPUHUB_CONTAINER_DISK", "none")])).unwrap().container_disk, None);
    let e = Config::load(None, env(&[("GPUHUB_CONTAINER_DISK", "1MiB")])).unwrap_err().to_string();
    assert!(e.contains("container_disk") && e.contains("less than the least accepted, 16MiB"), "{e}");
}

#[test]
fn the_lxd_engine_and_its_section_from_the_file_or_the_environment() {
    let c = Config::from_toml("engine = \"lxd\"\n[lxd]\nstorage_pool = \"fast\"\npoll_ms = 500\n").unwrap();
    assert_eq!(c.engine, EngineKind::Lxd);
    assert_eq!((c.lxd.storage_pool.as_str(), c.lxd.poll_ms), ("fast", 500));
    assert_eq!(c.lxd.socket, std::path::PathBuf::from("/var/lib/lxd/unix.socket"), "Debian's daemon by default");
    let vars = [("GPUHUB_ENGINE", "lxd"), ("GPUHUB_LXD_SOCKET", "/run/lxd.socket"), ("GPUHUB_LXD_NETWORK", "br0")];
    let c = Config::load(None, env(&vars)).unwrap();
    assert_eq!(
        (c.engine, c.lxd.socket.to_str(), c.lxd.network.as_deref()),
        (EngineKind::Lxd, Some("/run/lxd.socket"), Some("br0"))
    );
    let e = Config::load(None, env(&[("GPUHUB_LXD_SOCKET", "lxd.socket")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_LXD_SOCKET") && e.contains("absolute"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_ENGINE", "lx")])).unwrap_err().to_string();
    assert!(e.contains("is not docker, slurm, lxd or kubernetes"), "{e}");
    let e = Config::from_toml("[lxd]\nsockett = \"/x\"\n").unwrap_err();
    assert!(e.contains("sockett"), "{e}");
}

#[test]
fn the_kubernetes_engine_and_its_section_from_the_file_or_the_environment() {
    let c = Config::from_toml(
        "engine = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"/etc/gpuhub/kubeconfig\"\nnamespace = \"ml\"\n[kubernetes.node_selector]\ngpu = \"yes\"\n",
    )
    .unwrap();
    assert_eq!(c.engine, EngineKind::Kubernetes);
    assert_eq!(c.kubernetes.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/gpuhub/kubeconfig")));
    assert_eq!((c.kubernetes.namespace.as_str(), c.kubernetes.node_selector["gpu"].as_str()), ("ml", "yes"));
    let vars = [
        ("GPUHUB_ENGINE", "kubernetes"),
        ("GPUHUB_KUBERNETES_SHARING", "hami"),
        ("GPUHUB_KUBERNETES_VOLCANO", "true"),
        ("GPUHUB_KUBERNETES_GRACE_SECONDS", "5"),
    ];
    let c = Config::load(None, env(&vars)).unwrap();
    assert_eq!(c.kubernetes.sharing, gpuhub_driver::settings::kube::Sharing::Hami);
    assert!(c.kubernetes.volcano);
    assert_eq!((c.kubernetes.kubeconfig, c.kubernetes.grace_seconds), (None, 5), "in-cluster by default");
    let e = Config::load(None, env(&[("GPUHUB_KUBERNETES_SHARING", "time-slicing")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_KUBERNETES_SHARING") && e.contains("not none, hami or mps"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_KUBERNETES_NAMESPACE", "ML")])).unwrap_err().to_string();
    assert!(e.contains("DNS label"), "{e}");
    let e = Config::from_toml("[kubernetes]\nnamespaces = \"x\"\n").unwrap_err();
    assert!(e.contains("namespaces"), "{e}");
    // the README's example of the section is a valid config
    let readme = include_str!("../../../README.md");
    let section = &readme[readme.find("## Kubernetes").expect("a Kubernetes section")..];
    let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let c = Config::from_toml(&section[start..start + section[start..].find("```").unwrap()]).unwrap();
    assert_eq!((c.engine, c.kubernetes.namespace.as_str()), (EngineKind::Kubernetes, "gpuhub"));
}

/// Security review N11: users' networks from a pool the admin names; a bad pool or a block that does
/// not fit it stops the server at start, naming the key.
#[test]
fn network_pool_and_prefix() {
    let c = Config::load(None, env(&[])).unwrap();
    assert_eq!((c.network_block().unwrap(), c.network_prefix), (None, 26));
    let c =
        Config::load(None, env(&[("GPUHUB_NETWORK_POOL", "10.200.3.0/16"), ("GPUHUB_NETWORK_PREFIX", "24")])).unwrap();
    assert_eq!(c.network_block().unwrap(), Some(("10.200.0.0/16".parse().unwrap(), 24)));
    let c = Config::load(None, env(&[("GPUHUB_NETWORK_POOL", "")])).unwrap();
    assert_eq!(c.network_pool, None, "an empty variable unsets it");
    for (pool, prefix, key) in [
        ("10.200.0.0", "26", "network_pool"),
        ("fd00::/64", "26", "network_pool"),
        ("10.200.0.0/16", "12", "network_prefix"),
        ("10.200.0.0/16", "30", "network_prefix"),
    ] {
        let e =
            Config::load(None, env(&[("GPUHUB_NETWORK_POOL", pool), ("GPUHUB_NETWORK_PREFIX", prefix)])).unwrap_err();
        assert!(matches!(&e, ConfigError::Invalid { key: k, .. } if k == key), "{pool} /{prefix}: {e}");
    }
}

/// The variables' names are made from the keys they set; these are exactly the names of before.
#[test]
fn the_variable_names_are_those_of_before() {
    let before = "LISTEN SSH_LISTEN UID_RANGE DATA_DIR HOMES_DIR HOME_QUOTA TEAMS_DIR HOME_BACKEND CONTAINER_DISK \
        DATABASE_URL GPU_MODE GPUS ALLOW_ANY_IMAGE IMAGE_ALLOW PIDS_LIMIT PID_MAX ISOLATE_HOST NETWORK_POOL \
        NETWORK_PREFIX STOP_GRACE_SECS ON_ENGINE_RESTART RECONCILE_SECS SESSION_HOURS SECURE_COOKIES APPS_DOMAIN \
        PUBLIC_URL LOGIN_FAILURES LOGIN_WINDOW_SECS TOKEN_DAYS TRUSTED_PROXIES SCHEDULER_POLICY \
        ADMINS_ENTER_WORKSPACES ADMINS_OPEN_APPS ADMIN_PASSWORD SECRET_KEY DATASET_CACHE MAX_WORKLOADS_PER_USER \
        MAX_QUEUED_PER_USER MAX_COMMAND_BYTES MAX_ENV_BYTES MAX_APPS MAX_PERSONAL_IMAGES MAX_PERSONAL_IMAGE_BYTES \
        MAX_IN_FLIGHT GPU_SHARE_LIBRARY GPU_SHARING GUARD_GRACE_SECS MPS_CONTROL MPS_DIR MPS_EXCLUSIVE_PROCESS \
        LOG_MAX_BYTES ENGINE MONITOR_INTERVAL_SECS MONITOR_RAW_HOURS MONITOR_MINUTE_DAYS MONITOR_HOUR_DAYS \
        MONITOR_METRICS_TOKEN MONITOR_METRICS_ALLOW IDLE_ENABLED IDLE_THRESHOLD_PCT IDLE_AFTER_SECS IDLE_GRACE_SECS \
        IDLE_KEEP_MAX_HOURS IDLE_JOBS IDLE_EXEMPT_QUEUES IDLE_WEBHOOK SLURM_CONF SLURM_BIN_DIR SLURM_PARTITION \
        SLURM_ACCOUNT SLURM_QOS SLURM_MAP_USERNAMES SLURM_BUNDLE_DIR SLURM_LOG_DIR SLURM_OCI_RUNTIME SLURM_OCI_ROOT \
        SLURM_INIT SLURM_SHARDS_PER_GPU SLURM_ACCOUNTING SLURM_POLL_MS LXD_SOCKET LXD_PROJECT LXD_STORAGE_POOL \
        LXD_STATE_DIR LXD_NETWORK LXD_POLL_MS KUBERNETES_KUBECONFIG KUBERNETES_CONTEXT KUBERNETES_NAMESPACE \
        KUBERNETES_RUNTIME_CLASS KUBERNETES_GPU_RESOURCE KUBERNETES_SHARING KUBERNETES_SHARE_RESOURCE \
        KUBERNETES_VOLCANO KUBERNETES_GRACE_SECONDS KUBERNETES_APP_ACCESS KUBERNETES_HOME_STORAGE_CLASS KUBERNETES_HOME_SIZE LDAP_URL LDAP_STARTTLS LDAP_CA_FILE LDAP_BIND_DN \
        LDAP_BIND_PASSWORD LDAP_USER_BASE LDAP_USER_FILTER LDAP_GROUP_BASE LDAP_GROUP_FILTER LDAP_ADMIN_GROUP \
        OIDC_ISSUER_URL OIDC_CLIENT_ID OIDC_CLIENT_SECRET OIDC_REDIRECT_URL OIDC_USERNAME_CLAIM OIDC_GROUPS_CLAIM \
        OIDC_ADMIN_GROUP OIDC_SESSION_HOURS IDENTITY_RECHECK_SECS";
    let mut before: Vec<&str> = before.split_whitespace().collect();
    let mut now = env::SERVER_VARIABLES.clone();
    before.sort_unstable();
    now.sort_unstable();
    assert_eq!(now, before);
}

/// Every key of the table is a key of the typed configuration: a value of the wrong type there is an
/// error about the value at that key, never an unknown field.
#[test]
fn every_variable_sets_a_key_of_the_typed_config() {
    use figment::providers::Serialized;
    for (key, _) in env::SETTINGS {
        let r = figment::Figment::new().merge(Serialized::default(key, vec![[1u8]])).extract::<Config>();
        if let Err(e) = r {
            assert!(!matches!(e.kind, figment::error::Kind::UnknownField(..)), "{key}: {e}");
            assert!(e.path.join(".").starts_with(key), "{key}: {e}");
        }
    }
}

/// The file through the layers is the file as `from_toml` reads it (the README's example: every section).
#[test]
fn the_layered_file_is_the_file() {
    let readme = include_str!("../../../README.md");
    let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let text = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.toml");
    std::fs::write(&f, text).unwrap();
    let layered = Config::load(Some(&f), env(&[])).unwrap();
    let parsed = Config::from_toml(text).unwrap();
    assert_eq!(format!("{layered:?}"), format!("{parsed:?}"));
    // and what Debug leaves out
    let rest = |c: &Config| {
        format!(
            "{:?}",
            (
                &c.priority_classes,
                &c.queue_priority_classes,
                c.fair_share_half_life_hours,
                c.reserved_memory,
                c.reserved_cpu_milli,
                (c.isolate_host, c.login_failures, c.login_window_secs, c.token_days, &c.trusted_proxies),
                (c.admins_enter_workspaces, c.admins_open_apps, c.oidc_session_hours, c.identity_recheck_secs),
            )
        )
    };
    assert_eq!(rest(&layered), rest(&parsed));
}

/// A variable wins over the file, an empty one unsets what the file set, and a file's section that a
/// variable adds to keeps its other keys.
#[test]
fn variables_win_over_the_file_and_empty_ones_unset() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.toml");
    std::fs::write(
        &f,
        "homes_dir = \"/srv/homes\"\nhome_quota = \"1GiB\"\n[limits]\nmax_apps = 3\nmax_env_bytes = 100\n\
         [slurm]\npartition = \"gpu\"\naccount = \"lab\"\n",
    )
    .unwrap();
    let vars = [
        ("GPUHUB_HOMES_DIR", ""),
        ("GPUHUB_HOME_QUOTA", "none"),
        ("GPUHUB_MAX_APPS", "4"),
        ("GPUHUB_SLURM_PARTITION", "debug"),
    ];
    let c = Config::load(Some(&f), env(&vars)).unwrap();
    assert_eq!((c.homes_dir, c.home_quota), (None, None));
    assert_eq!((c.limits.max_apps, c.limits.max_env_bytes), (4, 100));
    assert_eq!((c.slurm.partition.as_deref(), c.slurm.account.as_deref()), (Some("debug"), Some("lab")));
}

/// Variables alone make an `[ldap]` section, whose check then says what is missing; with the file's
/// section they change only their keys.
#[test]
fn identity_sections_from_variables() {
    let e = Config::load(None, env(&[("GPUHUB_LDAP_URL", "ldaps://ldap.example.org")])).unwrap_err().to_string();
    assert!(e.starts_with("config ldap:"), "{e}");
    let c = Config::load(
        None,
        env(&[
            ("GPUHUB_LDAP_URL", "ldaps://ldap.example.org"),
            ("GPUHUB_LDAP_USER_BASE", "ou=people,dc=example,dc=org"),
            ("GPUHUB_LDAP_GROUP_BASE", "ou=groups,dc=example,dc=org"),
            ("GPUHUB_LDAP_BIND_PASSWORD", "hunter4"),
            ("GPUHUB_LDAP_BIND_DN", "cn=hub,dc=example,dc=org"),
        ]),
    )
    .unwrap();
    let l = c.ldap.as_ref().unwrap();
    assert_eq!((l.url.as_str(), l.user_base.as_str()), ("ldaps://ldap.example.org", "ou=people,dc=example,dc=org"));
    assert!(!format!("{c:?}").contains("hunter4"), "the bind password is redacted");
    let e = Config::load(None, env(&[("GPUHUB_LDAP_STARTTLS", "yes")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_LDAP_STARTTLS") && e.contains("is not true or false"), "{e}");
    let e = Config::load(None, env(&[("GPUHUB_OIDC_SESION_HOURS", "2")])).unwrap_err().to_string();
    assert!(e.contains("did you mean GPUHUB_OIDC_SESSION_HOURS?"), "{e}");
}

/// `uid_range` from the file or `GPUHUB_UID_RANGE`; a bad one names the variable.
#[test]
fn uid_range_from_the_file_or_the_environment() {
    assert_eq!(Config::default().uid_range, gpuhub_core::user::UidRange::default());
    let c = Config::from_toml("uid_range = \"80000-80999\"\n").unwrap();
    assert_eq!((c.uid_range.first, c.uid_range.last), (80000, 80999));
    let c = Config::load(None, env(&[("GPUHUB_UID_RANGE", "90000-90009")])).unwrap();
    assert_eq!((c.uid_range.first, c.uid_range.last), (90000, 90009));
    let e = Config::load(None, env(&[("GPUHUB_UID_RANGE", "10-20")])).unwrap_err().to_string();
    assert!(e.contains("GPUHUB_UID_RANGE") && e.contains("below 1000"), "{e}");
    assert!(Config::from_toml("uid_range = \"99999-70000\"\n").is_err());
}
