//! The JSON shapes of the HTTP API under `/api/v1`, shared by the server and the CLI: requests,
//! responses and the problem document of every error.
//!
//! Request types refuse unknown fields, so a typo is an error rather than a silently ignored setting.
//! With the `openapi` feature every type derives its OpenAPI schema (utoipa), and so do the domain
//! types of `gpuhub-core` they carry; without it this crate knows nothing of OpenAPI.
//!
//! A few shapes are domain records too (the store keeps them, the controller or an engine makes them):
//! they live in `gpuhub-core` and are re-exported here, so the API's users name them all from here.

mod cluster;
mod problem;
mod users;
mod workloads;

pub use cluster::{CreateReservationRequest, GpuHolder, GpuShareView, GpuView, NodeView, QueueView, QuotaView};
pub use gpuhub_core::catalog::ImageEntry;
pub use gpuhub_core::edit::EditWorkloadRequest;
pub use gpuhub_core::pull::PullView;
pub use gpuhub_core::queue::LimitView;
pub use gpuhub_core::reservation::ReservationView;
pub use gpuhub_core::state::{Explanation, StateEvent};
pub use problem::{FieldProblem, Problem};
pub use users::{
    ChangePasswordRequest, CreateTokenRequest, CreateUserRequest, HomeView, LoginRequest, NewTokenView,
    PatchUserRequest, TokenResponse, TokenView, UserView,
};
pub use workloads::{
    CreateWorkloadRequest, GpuGuardView, IdleReportRow, IdleView, KeepRequest, MIN_CPU_MILLI, NEXT_CURSOR_HEADER,
    PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, ResourceRequest, WorkloadView,
};
