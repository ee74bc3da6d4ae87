//! One SSH connection: public-key authentication through the backend, then channels.

use crate::{Shared, Target};
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use std::net::SocketAddr;
use std::sync::Arc;

/// The russh handler of one client connection.
#[derive(Debug)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
    peer: SocketAddr,
    target: Option<Target>,
    who: crate::Who,
}

impl Connection {
    pub(crate) fn new(shared: Arc<Shared>, peer: SocketAddr, who: crate::Who) -> Self {
        Self { shared, peer, target: None, who }
    }

    async fn decide(&self, user: &str, key: &russh::keys::PublicKey) -> Option<Target> {
        match self.shared.backend.authorize(user, key).await {
            Ok(target) => Some(target),
            Err(denied) => {
                tracing::info!(peer = %self.peer, user, key = %crate::fingerprint(key), reason = %denied, "ssh login refused");
                None
            }
        }
    }
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(&mut self, user: &str, offer: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        Ok(match self.decide(user, offer.public_key).await {
            Some(_) => Auth::Accept,
            None => Auth::reject(),
        })
    }

    async fn auth_publickey(&mut self, user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        match self.decide(user, key.public_key).await {
            Some(target) => {
                tracing::info!(
                    peer = %self.peer, user, owner = %target.owner, workspace = %target.workspace,
                    key = %crate::fingerprint(key.public_key), "ssh login"
                );
                *self.who.lock().unwrap() = Some((target.login.clone(), target.owner.clone()));
                self.target = Some(target);
                Ok(Auth::Accept)
            }
            None => Ok(Auth::reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some(target) = self.target.clone() else {
            return Ok(());
        };
        reply.accept().await;
        tokio::spawn(crate::channel::serve(self.shared.clone(), target, channel));
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some(target) = self.target.clone() else {
            return Ok(());
        };
        tokio::spawn(crate::forward::open(
            self.shared.clone(),
            target,
            channel,
            host_to_connect.to_string(),
            port_to_connect,
            reply,
        ));
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _col_width: u32,
        _row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        _variable_name: &str,
        _variable_value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn shell_request(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        _data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "sftp" { session.channel_success(channel) } else { session.channel_failure(channel) }
    }

    async fn x11_request(
        &mut self,
        channel: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }
}
