//! How bytes reach users' workspace apps: [`forward`] streams HTTP requests and WebSockets to an app in a
//! container (the server mounts it under `/w/<owner>/<workspace>/<app>/` after deciding who may pass),
//! and [`terminal`] bridges a browser WebSocket to a shell on a pseudo-terminal in the workspace, with
//! [`TERMINAL_HTML`], an xterm.js page that uses it.

mod forward;
mod terminal;

pub use forward::{HttpClient, forward, forward_until};
pub use terminal::{TERMINAL_HTML, XTERM_CSS, XTERM_FIT_JS, XTERM_JS, XTERM_LICENSES, asset, shell_exec, terminal};
