//! Submitting a workload: every check of the request (resources, gang size, queue, priority, constraint,
//! limits, environment, image, apps), then one insert bounded by the owner's caps.

use super::{Kind, Problems, ServiceError};
use crate::config::Limits;
use crate::state::AppState;
use gpuhub_api::CreateWorkloadRequest;
use gpuhub_core::dataset::DatasetMount;
use gpuhub_core::names;
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::service::{Service, ServiceAccess};
use gpuhub_core::user::User;
use gpuhub_core::workload::{AppSpec, Resources, Workload, WorkloadKind};
use gpuhub_driver::Placement;
use gpuhub_store::{CapReached, OwnerCaps, StoreError};

/// The most bytes of a request's image reference and of its constraint expression.
pub const MAX_FIELD_BYTES: usize = 4096;

/// Longest image reference accepted (Docker's own limit on a repository name is 255 bytes, plus tag
/// and digest).
const MAX_IMAGE_BYTES: usize = 512;

/// What a workspace submitted without a command runs: a POSIX shell that waits until it is stopped
/// (busybox's `sleep` has no `infinity`), ending at once, with 0, on SIGTERM, and taking its `sleep`
/// with it (left behind, it held the test runner's output pipe open for an hour).
pub const WORKSPACE_KEEP_ALIVE: [&str; 3] =
    ["sh", "-c", "trap 'kill $! 2>/dev/null; exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"];

/// Refuses a run-time limit above the maximum of `queue` (the default queue has none but 366 days).
pub(crate) async fn check_queue_cap(
    st: &AppState,
    queue: &str,
    limit: gpuhub_core::Seconds,
) -> Result<(), ServiceError> {
    if queue.is_empty() {
        return Ok(());
    }
    let Some(q) = st.store.get_queue(queue).await? else { return Ok(()) };
    match q.max_runtime {
        Some(max) if limit > max => Err(ServiceError::invalid_at(
            "runtime_limit",
            format!("invalid runtime_limit: {limit} is above queue {queue}'s maximum run time of {max}"),
        )),
        _ => Ok(()),
    }
}

/// Every part of a request larger than `limits` allow, each naming its field and the limit. The apps
/// of a catalog image are the admin's and do not count.
pub fn size_problems(limits: &Limits, req: &CreateWorkloadRequest) -> Vec<ServiceError> {
    let mut out = Vec::new();
    let args = |c: &[String]| c.iter().map(String::len).sum::<usize>();
    let command = req.command.as_deref().map_or(0, args) + req.apps.iter().map(|a| args(&a.command)).sum::<usize>();
    if command > limits.max_command_bytes {
        out.push(ServiceError::invalid_at(
            "command",
            format!(
                "invalid command: its arguments and those of its apps hold {command} bytes, more than the limit of \
             {} (limits.max_command_bytes)",
                limits.max_command_bytes
            ),
        ));
    }
    let env = req.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    if env > limits.max_env_bytes {
        out.push(ServiceError::invalid_at(
            "env",
            format!(
                "invalid env: its names and values hold {env} bytes, more than the limit of {} (limits.max_env_bytes)",
                limits.max_env_bytes
            ),
        ));
    }
    for (field, len) in [("image", req.image.len()), ("constraint", req.constraint.as_ref().map_or(0, String::len))] {
        if len > MAX_FIELD_BYTES {
            out.push(ServiceError::invalid_at(
                field,
                format!("invalid {field}: {len} bytes, more than the limit of {MAX_FIELD_BYTES}"),
            ));
        }
    }
    let apps = req.apps.len();
    if apps > limits.max_apps {
        out.push(ServiceError::invalid_at(
            "apps",
            format!("invalid apps: {apps} apps, more than the limit of {} (limits.max_apps)", limits.max_apps),
        ));
    }
    out
}

/// The refusal of a submission over one of the owner's count caps.
pub fn cap_error(owner: &str, limits: &Limits, cap: CapReached) -> ServiceError {
    let detail = match cap {
        CapReached::Total { count } => format!(
            "too many workloads: {owner} has {count}, the limit is {} (limits.max_workloads_per_user); \
             delete some that have ended",
            limits.max_workloads_per_user
        ),
        CapReached::Queued { count } => format!(
            "too many queued workloads: {owner} has {count} waiting, the limit is {} \
             (limits.max_queued_per_user); submit more once some have started",
            limits.max_queued_per_user
        ),
    };
    ServiceError::new(Kind::TooMany, detail)
}

/// Checks that one member's resources fit some node; when none does, the refusal names the largest
/// (most GPUs, then CPUs, then memory).
fn check_fits(nodes: &[NodeCapacity], r: &Resources) -> Result<(), ServiceError> {
    if nodes.iter().any(|n| gpuhub_core::admission::check_fits_node(n, r).is_ok()) {
        return Ok(());
    }
    let largest = nodes.iter().max_by_key(|n| (n.gpus.len(), n.cpus, n.memory));
    match largest {
        // the engine's nodes are unknown for now: the scheduler decides later
        None => Ok(()),
        Some(n) => Err(gpuhub_core::admission::check_fits_node(n, r).err().map(Into::into).unwrap_or_else(|| {
            ServiceError::invalid_at("resources", "invalid resources: no node here has what one member asks for")
        })),
    }
}

/// Submits a job or a workspace for `caller`. It is queued and starts as soon as its resources fit.
/// A refusal of its content names all that is wrong at once ([`prepare`]).
pub async fn submit(st: &AppState, caller: &User, req: &CreateWorkloadRequest) -> Result<Workload, ServiceError> {
    let w = prepare(st, caller, req).await?;
    // every member is a container with its own PID limit: together they leave the host room to fork
    super::pids::check(st, caller, u64::from(w.size.max(1))).await?;
    let limits = &st.config.limits;
    let caps = OwnerCaps { total: limits.max_workloads_per_user, queued: limits.max_queued_per_user };
    let inserted = if caller.is_admin() {
        st.store.insert_workload(&w).await.map(|()| None)
    } else {
        st.store.insert_workload_capped(&w, caps).await
    };
    match inserted {
        Ok(None) => {}
        Ok(Some(cap)) => return Err(cap_error(&w.owner, limits, cap)),
        Err(StoreError::Conflict(_)) => {
            let detail = format!("you already have a workload named {:?}", w.name);
            return Err(ServiceError::new(Kind::Conflict, detail).at("name"));
        }
        Err(e) => return Err(e.into()),
    }
    st.active.submitted(&w.id);
    st.states.submitted(&w.id);
    st.controller.kick();
    Ok(w)
}

/// The workload `req` makes for `caller`, checked but not stored. Every check of the request runs, so
/// that a refusal names all that is wrong at once ([`ServiceError::errors`], the first as its
/// `detail`); a check that needs a field another check refused (the queue's maximum run time, without
/// a queue) waits for the next try. The portal's form also asks it what else is wrong with a form it
/// could not read whole.
pub async fn prepare(st: &AppState, caller: &User, req: &CreateWorkloadRequest) -> Result<Workload, ServiceError> {
    let mut p = Problems::default();
    let owner = caller.username.clone();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = match &req.name {
        Some(n) => {
            p.check(names::validate("workload", n).map_err(|e| ServiceError::from(e).at("name")))?;
            n.clone()
        }
        None => format!("{}-{}", req.kind.as_str(), &id[..6]),
    };
    let caps = st.engine.capabilities();
    let resources = match req.resources.resolve_each() {
        Ok(r) => Some(r),
        Err(all) => {
            all.into_iter().for_each(|e| p.push(e.into()));
            None
        }
    };
    let nodes = st.nodes();
    if let Some(r) = &resources {
        if r.gpu_milli_total() > 0 && st.config.gpu_mode == crate::config::GpuMode::None {
            p.push(ServiceError::invalid_at(
                "resources.gpus",
                "invalid resources.gpus: this server hands out no GPUs (gpu_mode = none)",
            ));
        } else if r.gpu_milli > 0 && !caps.gpu_shares {
            p.push(ServiceError::invalid_at(
                "resources.gpu_milli",
                format!(
                    "invalid resources.gpu_milli: the {} engine cannot share a GPU; ask for whole GPUs",
                    st.engine.name()
                ),
            ));
        } else {
            p.check(check_fits(&nodes, r))?;
        }
    }
    let size = match req.members {
        None => Some(1),
        Some(0) => {
            p.push(ServiceError::invalid_at("members", "invalid members: a gang has at least 1 member"));
            None
        }
        Some(n) if n > caps.max_members => {
            p.push(ServiceError::invalid_at(
                "members",
                format!(
                    "invalid members: the {} engine runs at most {} members in one gang, not {n}",
                    st.engine.name(),
                    caps.max_members
                ),
            ));
            None
        }
        Some(n) => Some(n),
    };
    let live = st.live_config().await?; // the queues in force
    let queue = p.check(
        live.queue_for(&caller.username, caller.is_admin(), req.queue.as_deref())
            .map_err(|e| ServiceError::invalid_at("queue", format!("invalid queue: {e}"))),
    )?;
    let constraint = match req.constraint.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(c) => {
            p.check(
                gpuhub_sched::expr::Compiled::new(c)
                    .map_err(|e| ServiceError::invalid_at("constraint", format!("invalid constraint: {e}"))),
            )?;
            Some(c.to_owned())
        }
    };
    if req.runtime_limit.is_some_and(|l| l.0 == 0 || l.0 > 366 * 86_400) {
        p.push(ServiceError::invalid_at("runtime_limit", "invalid runtime_limit: must be from 1s to 366d"));
    } else if let (Some(limit), Some(queue)) = (req.runtime_limit, &queue) {
        p.check(check_queue_cap(st, queue, limit).await)?;
    }
    let (disk, priority) = match &queue {
        Some(queue) => (
            p.check(super::disk::resolve(st, queue, req.disk).await)?,
            p.check(live.priority_for(queue, caller.is_admin(), req.priority, req.priority_class.as_deref()).map_err(
                |e| {
                    ServiceError::invalid_at(
                        if req.priority_class.is_some() { "priority_class" } else { "priority" },
                        e,
                    )
                },
            ))?,
        ),
        None => (None, None),
    };
    p.check(gpuhub_core::env::check_user_env(&req.env).map_err(ServiceError::from))?;
    let sizes = size_problems(&st.config.limits, req);
    let image_too_long = sizes.iter().any(|e| e.field.as_deref() == Some("image"));
    sizes.into_iter().for_each(|e| p.push(e));
    let command = req.command.clone().unwrap_or_default();
    if command.iter().any(|a| a.contains('\0')) {
        p.push(ServiceError::invalid_at("command", "invalid command: arguments must not contain NUL"));
    }
    // a workspace stays up until stopped: with no command it runs one that only waits (an image's
    // default is often a shell, which ends at once without a terminal: newcomer bug 3); its apps,
    // terminal and SSH run beside it
    let command = if command.is_empty() && req.kind == WorkloadKind::Workspace {
        WORKSPACE_KEEP_ALIVE.iter().map(|s| (*s).to_owned()).collect()
    } else {
        command
    };
    let image = match st.store.get_personal_image(&caller.username, &req.image).await {
        // the caller's own saved workspace, by its name
        Ok(p) => Some((p.reference, Vec::new(), false)),
        // an image refused for its length is not looked up
        Err(StoreError::NotFound { .. }) if image_too_long => None,
        Err(StoreError::NotFound { .. }) => p.check(resolve_image(st, caller, &req.image).await)?,
        Err(e) => return Err(e.into()),
    };
    let (image, mut apps, pull) = image.unwrap_or_default();
    for app in &req.apps {
        if p.check(app.validate().map_err(ServiceError::from))?.is_none() {
            continue;
        }
        if apps.iter().any(|a| a.name == app.name) {
            p.push(ServiceError::invalid_at("apps", format!("invalid apps: {} is declared twice", app.name)));
            continue;
        }
        apps.push(app.clone());
    }
    let service = p.check(service_of(req, size.unwrap_or(1), &mut apps))?.flatten();
    if service.as_ref().is_some_and(|s| s.spec.access != ServiceAccess::Owner) && st.config.apps_domain.is_none() {
        // on the hub's own origin, a page of the service would run with each visitor's session
        p.push(ServiceError::invalid_at(
            "service.access",
            "invalid service.access: opening a service to others needs apps_domain (each app on an origin of its own)",
        ));
    }
    let datasets = p.check(resolve_datasets(st, &req.datasets).await)?;
    let teams = p.check(crate::service::teams::resolve(st, caller, &req.teams).await)?;
    p.finish()?;
    let (Some(resources), Some(size), Some(queue), Some(priority), Some(datasets), Some(teams)) =
        (resources, size, queue, priority, datasets, teams)
    else {
        // each None noted a problem, and there were none
        return Err(ServiceError::internal("a submission's check passed without a value"));
    };
    let first_message = if pull { format!("pulling {image}") } else { "queued".into() };
    let now = st.clock.now();
    let mut w = Workload::new(id, owner, name, req.kind, image, now);
    if pull {
        w = w.pull_first();
    }
    w.command = command;
    w.env = req.env.clone();
    w.resources = resources;
    w.priority = priority;
    w.queue = queue;
    w.constraint = constraint;
    w.runtime_limit = req.runtime_limit;
    w.disk = disk.flatten();
    w.apps = apps;
    w.size = size;
    w.message = Some(first_message);
    w.datasets = datasets;
    w.teams = teams;
    w.service = service;
    // work that could never start is refused now, naming why; where the engine places, its queue
    // limits are the engine's, so only the nodes count here
    let mut scheduler = live.scheduler.clone();
    if caps.placement == Placement::Engine {
        scheduler.queues.clear();
    }
    if !nodes.is_empty() {
        if let Some(why) = gpuhub_controller::unmet::never(&nodes, &w, &scheduler) {
            return Err(ServiceError::invalid_at("resources", format!("this workload can never start here: {why}")));
        }
    }
    Ok(w)
}

/// The most datasets one workload mounts.
const MAX_DATASETS: usize = 32;

/// The datasets a request names, with their registered paths; an unknown or repeated name is refused,
/// naming the datasets there are.
async fn resolve_datasets(st: &AppState, names: &[String]) -> Result<Vec<DatasetMount>, ServiceError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    if !st.engine.capabilities().volumes {
        return Err(ServiceError::invalid_at(
            "datasets",
            format!("invalid datasets: the {} engine mounts no datasets", st.engine.name()),
        ));
    }
    if names.len() > MAX_DATASETS {
        return Err(ServiceError::invalid_at(
            "datasets",
            format!("invalid datasets: {} named, more than the limit of {MAX_DATASETS}", names.len()),
        ));
    }
    let mut out: Vec<DatasetMount> = Vec::new();
    for n in names {
        if out.iter().any(|d| &d.name == n) {
            return Err(ServiceError::invalid_at("datasets", format!("invalid datasets: {n} is named twice")));
        }
        match st.store.get_dataset(n).await {
            Ok(d) if d.nfs.is_some() && !st.engine.capabilities().nfs => {
                return Err(ServiceError::invalid_at(
                    "datasets",
                    format!(
                        "invalid datasets: {n} is an NFS export, which the {} engine does not mount",
                        st.engine.name()
                    ),
                ));
            }
            Ok(d) if d.s3.is_some() => out.push(s3_mount(st, &d)?),
            Ok(d) => out.push(d.mount()),
            Err(StoreError::NotFound { .. }) => {
                let known: Vec<String> = st.store.list_datasets().await?.into_iter().map(|d| d.name).collect();
                let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                return Err(ServiceError::invalid_at(
                    "datasets",
                    format!("invalid datasets: no dataset named {n:?} (datasets: {known})"),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// An S3 dataset's mount: the directory where the server mounts it on this host, which must be
/// mounted now (else the job would see an empty directory, or none).
fn s3_mount(st: &AppState, d: &gpuhub_core::dataset::Dataset) -> Result<DatasetMount, ServiceError> {
    if !crate::s3mounts::reached_by(st.config.engine) {
        let detail = format!(
            "invalid datasets: {} is object storage, which the {} engine does not mount",
            d.name,
            st.engine.name()
        );
        return Err(ServiceError::invalid_at("datasets", detail));
    }
    match st.s3.status(&d.name) {
        Some(s) if s == "mounted" => {}
        s => {
            let s = s.unwrap_or_else(|| "not mounted".into());
            let detail = format!("dataset {} is not mounted on the hub ({s}); try again shortly", d.name);
            return Err(ServiceError::new(Kind::Unavailable, detail).at("datasets"));
        }
    }
    Ok(DatasetMount { path: st.s3.path(&d.name).display().to_string(), ..d.mount() })
}

/// A service's terms, checked: only kind `service` has them (and must), it has one member, and its
/// port is served through the hub's proxy as its app `service` (added to `apps`).
fn service_of(
    req: &CreateWorkloadRequest,
    size: u32,
    apps: &mut Vec<AppSpec>,
) -> Result<Option<Service>, ServiceError> {
    let spec = match (req.kind, &req.service) {
        (WorkloadKind::Service, None) => {
            return Err(ServiceError::invalid_at(
                "service",
                "invalid service: a service names the port it serves (\"service\": {\"port\": 8080})",
            ));
        }
        (WorkloadKind::Service, Some(spec)) => spec,
        (_, None) => return Ok(None),
        (kind, Some(_)) => {
            return Err(ServiceError::invalid_at(
                "service",
                format!("invalid service: only a workload of kind service has one, not a {}", kind.as_str()),
            ));
        }
    };
    spec.validate()?;
    if size != 1 {
        return Err(ServiceError::invalid_at("members", "invalid members: a service has one member"));
    }
    if apps.iter().any(|a| a.name == SERVICE_APP) {
        return Err(ServiceError::invalid_at(
            "apps",
            format!("invalid apps: {SERVICE_APP} is the service's own app; name yours otherwise"),
        ));
    }
    apps.push(AppSpec { name: SERVICE_APP.into(), port: spec.port, command: Vec::new() });
    Ok(Some(Service::new(spec.clone())))
}

/// The app a service's port is served as (`/w/<owner>/<name>/service/`).
pub const SERVICE_APP: &str = "service";

/// A catalog name becomes its image reference and apps. What may run: a catalog image; an image
/// `image_allow` names; with `allow_any_image`, any image the engine has. The third value says the
/// engine lacks the image and it is to be pulled (catalog images and those `image_allow` names are).
/// Another user's personal image runs by no other name either ([`check_not_anothers`]).
pub(super) async fn resolve_image(
    st: &AppState,
    caller: &User,
    image: &str,
) -> Result<(String, Vec<AppSpec>, bool), ServiceError> {
    if image.trim().is_empty() {
        return Err(ServiceError::invalid_at("image", "invalid image: must not be empty"));
    }
    if image.len() > MAX_IMAGE_BYTES || !image.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ServiceError::invalid_at(
            "image",
            format!(
                "invalid image: {:?} is not an image reference (at most {MAX_IMAGE_BYTES} bytes of printable ASCII, no spaces)",
                image.chars().take(80).collect::<String>()
            ),
        ));
    }
    let (reference, apps, catalog) = match st.store.get_image(image).await {
        Ok(entry) => (entry.image, entry.apps, true),
        Err(StoreError::NotFound { .. }) => (image.to_owned(), Vec::new(), false),
        Err(e) => return Err(e.into()),
    };
    // before the engine is asked: a reference is part of the engine's API paths
    if let Err(why) = gpuhub_core::image::check_reference(&reference) {
        return Err(ServiceError::invalid_at(
            "image",
            format!("invalid image: {reference:?} is not an image reference: {why}"),
        ));
    }
    let policy = gpuhub_core::image::check_pull(&st.config.image_allow, &reference);
    if !catalog && !st.config.allow_any_image && policy.is_err() {
        let why = policy.err().unwrap_or_default();
        return Err(ServiceError::invalid_at(
            "image",
            format!(
                "invalid image: {image:?} is not in the catalog (see GET /api/v1/images), and this server runs \
                 catalog images only; {why}"
            ),
        ));
    }
    if !catalog {
        check_not_anothers(st, caller, &reference).await?;
    }
    if st.engine.image_exists(&reference).await? {
        return Ok((reference, apps, false));
    }
    if !st.engine.capabilities().pull && (catalog || policy.is_ok()) {
        return Err(ServiceError::invalid_at(
            "image",
            format!(
                "invalid image: the {} engine has no {reference:?} and pulls no images; pull it into the hub's \
                 Docker engine first",
                st.engine.name()
            ),
        ));
    }
    match policy {
        _ if catalog => Ok((reference, apps, true)),
        Ok(()) => Ok((reference, apps, true)),
        Err(why) => Err(ServiceError::invalid_at(
            "image",
            format!(
                "invalid image: {reference:?} is neither a catalog name nor an image the container engine has; {why}"
            ),
        )),
    }
}

/// Refuses `reference` when it names a personal image that is not one of `caller`'s own: by its
/// reference in any spelling, or by anything the engine resolves to an image tagged as one (its ID).
/// Personal images run only for their owner, whatever `allow_any_image` and `image_allow` say; an
/// admin publishes one to the catalog for others to run.
async fn check_not_anothers(st: &AppState, caller: &User, reference: &str) -> Result<(), ServiceError> {
    use gpuhub_core::image::is_personal;
    let tags = st.engine.image_tags(reference).await?;
    let personal: Vec<&String> = tags.iter().filter(|t| is_personal(t)).collect();
    // an image the engine lacks (or cannot name) is judged by the reference alone
    if personal.is_empty() && !(tags.is_empty() && is_personal(reference)) {
        return Ok(());
    }
    let mine = st.store.list_personal_images(&caller.username).await?;
    let own = |r: &str| mine.iter().any(|p| p.reference == r);
    let theirs = if tags.is_empty() { !own(reference) } else { personal.iter().any(|t| !own(t)) };
    if !theirs {
        return Ok(());
    }
    Err(ServiceError::invalid_at(
        "image",
        format!(
            "invalid image: {reference:?} is another user's personal image; a personal image runs only for its \
             owner (yours: GET /api/v1/me/images)"
        ),
    ))
}
