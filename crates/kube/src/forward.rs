//! App ports through the API server's port-forward (`pods/portforward`), for a hub outside the
//! cluster that cannot reach pods' IPs (`app_access`): the endpoint of a member's port is a listener
//! on the hub's 127.0.0.1, and each connection to it is one port-forward stream to the pod's port
//! (the `portforward.k8s.io` websocket: a data and an error channel per port). The listener is made
//! once per pod and port and closes when its run is removed or its pod is found gone (a forward
//! answered 404).

use crate::engine::{KubeEngine, api_err};
use crate::held::{Forward, Forwards};
use gpuhub_driver::EngineError;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

impl KubeEngine {
    /// The hub's local address forwarding to `port` of the pod `name` (of run `run`), made on first
    /// use.
    pub(crate) async fn forward(&self, run: &str, name: &str, port: u16) -> Result<SocketAddr, EngineError> {
        let key = (name.to_owned(), port);
        if let Some(f) = self.forwards.lock().unwrap().get(&key) {
            return Ok(f.addr);
        }
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| EngineError::Engine(format!("listening for a port-forward to {name}:{port}: {e}")))?;
        let addr =
            listener.local_addr().map_err(|e| EngineError::Engine(format!("the port-forward's address: {e}")))?;
        let mut forwards = self.forwards.lock().unwrap();
        if let Some(f) = forwards.get(&key) {
            // another request made one meanwhile
            return Ok(f.addr);
        }
        let close = Arc::new(Notify::new());
        forwards.insert(key.clone(), Forward { addr, run: run.to_owned(), close: close.clone() });
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.config.namespace);
        tokio::spawn(serve(listener, pods, key, self.forwards.clone(), close));
        Ok(addr)
    }

    /// Closes the forwards to `run`'s pods (the run is removed).
    pub(crate) fn close_forwards(&self, run: &str) {
        self.forwards.lock().unwrap().retain(|_, f| {
            if f.run == run {
                f.close.notify_one();
            }
            f.run != run
        });
    }
}

/// Accepts connections for `key` until its pod is gone, each one forwarded on its own.
async fn serve(listener: TcpListener, pods: Api<Pod>, key: (String, u16), forwards: Forwards, close: Arc<Notify>) {
    let (gone_tx, mut gone) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = gone.recv() => break,
            _ = close.notified() => break,
        };
        let Ok((conn, _)) = conn else { continue };
        let (pods, name, port, gone_tx) = (pods.clone(), key.0.clone(), key.1, gone_tx.clone());
        tokio::spawn(async move {
            if let Err(e) = one(conn, &pods, &name, port).await {
                tracing::debug!(pod = %name, port, "port-forward: {e}");
                if matches!(e, EngineError::NotFound(_)) {
                    let _ = gone_tx.try_send(());
                }
            }
        });
    }
    let mut forwards = forwards.lock().unwrap();
    if forwards.get(&key).is_some_and(|f| Arc::ptr_eq(&f.close, &close)) {
        forwards.remove(&key);
    }
}

/// One connection: a port-forward stream to the pod's port, copied both ways until either side ends.
async fn one(mut conn: TcpStream, pods: &Api<Pod>, name: &str, port: u16) -> Result<(), EngineError> {
    let what = format!("port-forward to pod {name} port {port}");
    let mut pf = pods.portforward(name, &[port]).await.map_err(|e| api_err(&what, e))?;
    let mut upstream = pf.take_stream(port).ok_or_else(|| EngineError::Engine(format!("{what}: no stream")))?;
    let error = pf.take_error(port);
    let copied = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
    drop(upstream);
    if let Some(error) = error
        && let Some(e) = error.await
    {
        return Err(EngineError::Engine(format!("{what}: {e}")));
    }
    copied.map_err(|e| EngineError::Engine(format!("{what}: {e}")))?;
    pf.join().await.map_err(|e| EngineError::Engine(format!("{what}: {e}")))
}
