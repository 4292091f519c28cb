//! One connection's Diameter peer state machine (RFC 6733 §5.6), sans-IO.
//!
//! The caller feeds it what happened ([`PeerMachine::receive`],
//! [`PeerMachine::on_timer`], [`PeerMachine::close`],
//! [`PeerMachine::transport_closed`]) with the current time, then drains
//! [`PeerMachine::poll_action`] and sleeps until
//! [`PeerMachine::next_deadline`]. It never blocks and never reads a clock.
//!
//! Deviations and choices, so they are written down in one place:
//! - Anything but a CER first (responder) or a CEA first (initiator) closes
//!   the connection (RFC 6733 §5.6: Error -> Closed).
//! - A CER on an open connection is answered with a CEA carrying our
//!   capabilities and DIAMETER_SUCCESS, and nothing is renegotiated: the RFC
//!   state table says R-Open + R-Rcv-CER -> R-Snd-CEA (3008 is for bad header
//!   bits and does not apply); renegotiation is RFC 6737's CUR, not CER.
//! - The allow-list and the application intersection are checked here; the
//!   election and duplicate-connection checks need to see every connection,
//!   so the machine asks the transport with [`Action::Admit`].

use super::application::NegotiatedApps;
use super::capabilities::{encode_capabilities, PeerCapabilities};
use super::disconnect_cause::DisconnectCause;
use super::jitter::Jitter;
use super::local_node::LocalNode;
use super::settings::PeerSettings;
use super::watchdog::{Watchdog, WatchdogAction, WatchdogState};
use crate::codec::{DiameterError, Message, MessageBuilder, FLAG_E};
use crate::dict::{app, avp, cmd};
use crate::result_code;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// Which side opened the transport connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// We connected and send the CER.
    Initiator,
    /// The peer connected; we wait for its CER.
    Responder,
}

/// Where the connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PeerState {
    /// Responder: waiting for the CER.
    WaitCer = 0,
    /// Initiator: CER sent, waiting for the CEA.
    WaitCea = 1,
    /// Responder: a valid CER arrived; waiting for the transport to
    /// [`accept`](PeerMachine::accept) or [`refuse`](PeerMachine::refuse) it.
    Admitting = 2,
    /// Capabilities exchanged; application messages flow.
    Open = 3,
    /// We sent DPR and wait for the DPA.
    Closing = 4,
    /// Finished: the transport must be closed.
    Closed = 5,
}

impl PeerState {
    /// Decodes the `repr(u8)` value (for atomics); unknown values are Closed.
    pub fn from_u8(v: u8) -> PeerState {
        match v {
            0 => PeerState::WaitCer,
            1 => PeerState::WaitCea,
            2 => PeerState::Admitting,
            3 => PeerState::Open,
            4 => PeerState::Closing,
            _ => PeerState::Closed,
        }
    }
    /// A short lower-case name for logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            PeerState::WaitCer => "wait_cer",
            PeerState::WaitCea => "wait_cea",
            PeerState::Admitting => "admitting",
            PeerState::Open => "open",
            PeerState::Closing => "closing",
            PeerState::Closed => "closed",
        }
    }
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer sent DPR with this cause (`None`: missing or unknown value).
    PeerDisconnect(Option<DisconnectCause>),
    /// We sent DPR; the DPA arrived or the wait for it ended.
    LocalDisconnect(DisconnectCause),
    /// We refused the peer's CER with this Result-Code.
    Refused(u32),
    /// The peer's CEA failed with this Result-Code (5010 also when it
    /// succeeded but shares no application with us).
    Rejected(u32),
    /// No CER or CEA within the configured time.
    CapabilitiesTimeout,
    /// RFC 3539: the peer did not answer watchdogs for two intervals.
    WatchdogDown,
    /// A message not allowed in the current state (e.g. not a CER first).
    ProtocolViolation,
    /// The transport closed or failed.
    TransportClosed,
}

/// What the transport must do.
#[derive(Debug)]
pub enum Action {
    /// Write this message.
    Send(Bytes),
    /// Responder: a CER passed the allow-list and application checks. The
    /// transport checks duplicates/election and calls
    /// [`accept`](PeerMachine::accept) or [`refuse`](PeerMachine::refuse).
    Admit,
    /// The connection is open: [`PeerMachine::peer`] and
    /// [`PeerMachine::negotiated`] are set.
    Open,
    /// The watchdog state changed (SUSPECT: route no new requests here).
    Watchdog(WatchdogState),
    /// Flush what was sent, then close the transport.
    Close(CloseReason),
    /// The peer sent something after [`PeerMachine::probe`]: the
    /// connection is alive.
    Alive,
}

/// What to do with a received message.
#[derive(Debug)]
pub enum Inbound {
    /// It was base protocol (CER/CEA, DWR/DWA, DPR/DPA): handled here.
    Consumed,
    /// An application request or answer for the transport to route.
    Application(Message),
}

/// The peer state machine of one connection.
pub struct PeerMachine {
    role: Role,
    state: PeerState,
    local: Arc<LocalNode>,
    settings: Arc<PeerSettings>,
    remote_addr: Option<SocketAddr>,
    local_ip: Option<IpAddr>,
    peer: Option<PeerCapabilities>,
    negotiated: NegotiatedApps,
    /// The CER being admitted, to answer once the transport decides.
    pending_cer: Option<Message>,
    watchdog: Watchdog,
    /// CER/CEA wait or DPA wait.
    deadline: Option<Instant>,
    closing_cause: DisconnectCause,
    actions: VecDeque<Action>,
    out: BytesMut,
    next_hbh: u32,
    next_e2e: u32,
    /// A [`PeerMachine::probe`] DWR went out and nothing came back yet.
    probe_pending: bool,
}

impl PeerMachine {
    /// A connection the peer opened: waits for its CER.
    pub fn responder(
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        remote_addr: Option<SocketAddr>,
        local_ip: Option<IpAddr>,
        now: Instant,
        jitter: Jitter,
    ) -> PeerMachine {
        let mut m = Self::new(
            Role::Responder,
            local,
            settings,
            remote_addr,
            local_ip,
            now,
            jitter,
        );
        m.state = PeerState::WaitCer;
        m
    }

    /// A connection we opened (the transport is connected): sends the CER.
    pub fn initiator(
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        remote_addr: Option<SocketAddr>,
        local_ip: Option<IpAddr>,
        now: Instant,
        jitter: Jitter,
    ) -> PeerMachine {
        let mut m = Self::new(
            Role::Initiator,
            local,
            settings,
            remote_addr,
            local_ip,
            now,
            jitter,
        );
        m.state = PeerState::WaitCea;
        let (hbh, e2e) = m.next_ids();
        let mut b = MessageBuilder::new(
            &mut m.out,
            crate::codec::FLAG_R,
            cmd::CAPABILITIES_EXCHANGE,
            app::DIAMETER_COMMON_MESSAGES,
            hbh,
            e2e,
        );
        encode_capabilities(&mut b, &m.local, m.local_ip);
        b.finish();
        m.flush_out();
        m
    }

    fn new(
        role: Role,
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        remote_addr: Option<SocketAddr>,
        local_ip: Option<IpAddr>,
        now: Instant,
        mut jitter: Jitter,
    ) -> PeerMachine {
        let next_hbh = jitter.next_u64() as u32;
        let next_e2e =
            ((local.origin_state_id & 0xfff) << 20) | (jitter.next_u64() as u32 & 0xf_ffff);
        PeerMachine {
            role,
            state: PeerState::WaitCer,
            deadline: Some(now + settings.cer_timeout),
            watchdog: Watchdog::new(settings.tw, now, jitter),
            local,
            settings,
            remote_addr,
            local_ip,
            peer: None,
            negotiated: NegotiatedApps::default(),
            pending_cer: None,
            closing_cause: DisconnectCause::Rebooting,
            actions: VecDeque::new(),
            out: BytesMut::with_capacity(1024),
            next_hbh,
            next_e2e,
            probe_pending: false,
        }
    }

    /// Our role on this connection.
    pub fn role(&self) -> Role {
        self.role
    }
    /// The current state.
    pub fn state(&self) -> PeerState {
        self.state
    }
    /// The RFC 3539 watchdog state (meaningful once open).
    pub fn watchdog_state(&self) -> WatchdogState {
        self.watchdog.state()
    }
    /// The peer's capabilities, once its CER/CEA was accepted.
    pub fn peer(&self) -> Option<&PeerCapabilities> {
        self.peer.as_ref()
    }
    /// The applications both sides share (empty until open).
    pub fn negotiated(&self) -> &NegotiatedApps {
        &self.negotiated
    }
    /// The peer's transport address, if known.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote_addr
    }

    /// The next thing the transport must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`on_timer`](Self::on_timer) must be called next (`None`: never).
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            PeerState::Open => Some(self.watchdog.deadline()),
            PeerState::Closed => None,
            _ => self.deadline,
        }
    }

    fn next_ids(&mut self) -> (u32, u32) {
        let hbh = self.next_hbh;
        self.next_hbh = self.next_hbh.wrapping_add(1);
        let e2e = self.next_e2e;
        self.next_e2e = (e2e & 0xfff0_0000) | (e2e.wrapping_add(1) & 0xf_ffff);
        (hbh, e2e)
    }

    fn flush_out(&mut self) {
        let msg = self.out.split().freeze();
        self.actions.push_back(Action::Send(msg));
    }

    fn finish_with(&mut self, reason: CloseReason) {
        if self.state != PeerState::Closed {
            self.state = PeerState::Closed;
            self.pending_cer = None;
            self.actions.push_back(Action::Close(reason));
        }
    }

    /// A message arrived. Base protocol messages are handled here;
    /// application messages come back for routing once the peer is open.
    pub fn receive(&mut self, now: Instant, msg: Message) -> Inbound {
        let is_base = msg.application_id() == app::DIAMETER_COMMON_MESSAGES;
        let code = msg.command_code();
        let is_req = msg.is_request();
        match self.state {
            PeerState::Closed => Inbound::Consumed,
            PeerState::WaitCer => {
                if is_base && is_req && code == cmd::CAPABILITIES_EXCHANGE {
                    self.on_cer(msg);
                } else {
                    self.finish_with(CloseReason::ProtocolViolation);
                }
                Inbound::Consumed
            }
            PeerState::WaitCea => {
                if is_base && !is_req && code == cmd::CAPABILITIES_EXCHANGE {
                    self.on_cea(now, &msg);
                } else {
                    self.finish_with(CloseReason::ProtocolViolation);
                }
                Inbound::Consumed
            }
            PeerState::Admitting => {
                // Nothing may arrive before our CEA.
                self.finish_with(CloseReason::ProtocolViolation);
                Inbound::Consumed
            }
            PeerState::Open | PeerState::Closing => {
                if self.probe_pending {
                    // Any message proves the peer reads and writes (RFC
                    // 3539 counts all traffic, not only DWA).
                    self.probe_pending = false;
                    self.actions.push_back(Action::Alive);
                }
                let is_dwa = is_base && !is_req && code == cmd::DEVICE_WATCHDOG;
                let before = self.watchdog.state();
                self.watchdog.on_receive(now, is_dwa);
                if before != self.watchdog.state() {
                    self.actions
                        .push_back(Action::Watchdog(self.watchdog.state()));
                }
                if !is_base {
                    return Inbound::Application(msg);
                }
                match (code, is_req) {
                    (cmd::DEVICE_WATCHDOG, true) => {
                        self.answer_base(&msg, true);
                        Inbound::Consumed
                    }
                    (cmd::DEVICE_WATCHDOG, false) => Inbound::Consumed,
                    (cmd::CAPABILITIES_EXCHANGE, true) => {
                        self.send_cea(&msg, result_code::DIAMETER_SUCCESS, None);
                        Inbound::Consumed
                    }
                    (cmd::CAPABILITIES_EXCHANGE, false) => Inbound::Consumed,
                    (cmd::DISCONNECT_PEER, true) => {
                        let cause = msg
                            .find(avp::DISCONNECT_CAUSE)
                            .ok()
                            .flatten()
                            .and_then(|a| a.as_enum().ok())
                            .and_then(DisconnectCause::from_value);
                        self.answer_base(&msg, false);
                        self.finish_with(CloseReason::PeerDisconnect(cause));
                        Inbound::Consumed
                    }
                    (cmd::DISCONNECT_PEER, false) => {
                        if self.state == PeerState::Closing {
                            let cause = self.closing_cause;
                            self.finish_with(CloseReason::LocalDisconnect(cause));
                        }
                        Inbound::Consumed
                    }
                    // Other application-0 messages (none defined by the base
                    // protocol) are for the application to answer or reject.
                    _ => Inbound::Application(msg),
                }
            }
        }
    }

    fn on_cer(&mut self, cer: Message) {
        let caps = match PeerCapabilities::parse(&cer) {
            Ok(c) => c,
            Err(e) => {
                self.send_cea(&cer, e.result_code, Some(&e));
                self.finish_with(CloseReason::Refused(e.result_code));
                return;
            }
        };
        if !self
            .settings
            .is_allowed(&caps.origin_host, self.remote_addr.map(|a| a.ip()))
        {
            let e = DiameterError::new(result_code::DIAMETER_UNKNOWN_PEER, "peer not allowed");
            self.send_cea(&cer, e.result_code, Some(&e));
            self.finish_with(CloseReason::Refused(e.result_code));
            return;
        }
        let negotiated = NegotiatedApps::intersect(&self.local.applications, &caps.applications);
        if negotiated.is_empty() {
            let e = DiameterError::new(
                result_code::DIAMETER_NO_COMMON_APPLICATION,
                "no common application",
            );
            self.send_cea(&cer, e.result_code, Some(&e));
            self.finish_with(CloseReason::Refused(e.result_code));
            return;
        }
        self.peer = Some(caps);
        self.negotiated = negotiated;
        self.pending_cer = Some(cer);
        self.state = PeerState::Admitting;
        self.actions.push_back(Action::Admit);
    }

    /// Responder: admit the peer whose CER is pending: answer success, open.
    pub fn accept(&mut self, now: Instant) {
        if self.state != PeerState::Admitting {
            return;
        }
        if let Some(cer) = self.pending_cer.take() {
            self.send_cea(&cer, result_code::DIAMETER_SUCCESS, None);
        }
        self.open(now);
    }

    /// Responder: refuse the peer whose CER is pending with this Result-Code
    /// (e.g. 4003 ELECTION_LOST, 5012 for a duplicate connection), then close.
    pub fn refuse(&mut self, result_code: u32, message: &'static str) {
        if self.state != PeerState::Admitting {
            return;
        }
        if let Some(cer) = self.pending_cer.take() {
            let e = DiameterError::new(result_code, message);
            self.send_cea(&cer, result_code, Some(&e));
        }
        self.finish_with(CloseReason::Refused(result_code));
    }

    /// Initiator: the transport refuses the peer whose CEA just opened the
    /// connection (e.g. its TLS certificate does not name the Origin-Host
    /// it sent). Closes at once, without DPR: the peer is not who the
    /// connection says it is.
    pub fn reject(&mut self, result_code: u32) {
        if self.role == Role::Initiator && self.state == PeerState::Open {
            self.finish_with(CloseReason::Rejected(result_code));
        }
    }

    fn open(&mut self, now: Instant) {
        self.state = PeerState::Open;
        self.deadline = None;
        let jitter = Jitter::seeded(u64::from(self.next_hbh) << 17 ^ u64::from(self.next_e2e));
        self.watchdog = Watchdog::new(self.settings.tw, now, jitter);
        self.actions.push_back(Action::Open);
    }

    fn on_cea(&mut self, now: Instant, cea: &Message) {
        let rc = match cea.find(avp::RESULT_CODE) {
            Ok(Some(a)) => a
                .as_u32()
                .unwrap_or(result_code::DIAMETER_INVALID_AVP_VALUE),
            Ok(None) => result_code::DIAMETER_MISSING_AVP,
            Err(e) => e.result_code,
        };
        if cea.flags() & FLAG_E != 0 || rc != result_code::DIAMETER_SUCCESS {
            self.finish_with(CloseReason::Rejected(rc));
            return;
        }
        let caps = match PeerCapabilities::parse(cea) {
            Ok(c) => c,
            Err(e) => {
                self.finish_with(CloseReason::Rejected(e.result_code));
                return;
            }
        };
        let negotiated = NegotiatedApps::intersect(&self.local.applications, &caps.applications);
        if negotiated.is_empty() {
            self.finish_with(CloseReason::Rejected(
                result_code::DIAMETER_NO_COMMON_APPLICATION,
            ));
            return;
        }
        self.peer = Some(caps);
        self.negotiated = negotiated;
        self.open(now);
    }

    fn send_cea(&mut self, cer: &Message, rc: u32, err: Option<&DiameterError>) {
        let mut b = MessageBuilder::answer(&mut self.out, cer);
        if result_code::is_protocol_error(rc) {
            b.set_flags(b.flags() | FLAG_E);
        }
        b.result_code(rc);
        encode_capabilities(&mut b, &self.local, self.local_ip);
        if let Some(e) = err {
            if !e.message.is_empty() {
                b.str(avp::ERROR_MESSAGE, &e.message);
            }
            if let Some(f) = &e.failed_avp {
                b.failed_avp(f);
            }
        }
        b.finish();
        self.flush_out();
    }

    /// DWA (with Origin-State-Id) or DPA.
    fn answer_base(&mut self, req: &Message, with_state: bool) {
        let mut b = MessageBuilder::answer(&mut self.out, req);
        b.result_code(result_code::DIAMETER_SUCCESS)
            .origin(&self.local.origin_host, &self.local.origin_realm);
        if with_state {
            b.u32(avp::ORIGIN_STATE_ID, self.local.origin_state_id);
        }
        b.finish();
        self.flush_out();
    }

    fn send_dwr(&mut self) {
        let (hbh, e2e) = self.next_ids();
        let mut b = MessageBuilder::new(
            &mut self.out,
            crate::codec::FLAG_R,
            cmd::DEVICE_WATCHDOG,
            app::DIAMETER_COMMON_MESSAGES,
            hbh,
            e2e,
        );
        b.origin(&self.local.origin_host, &self.local.origin_realm)
            .u32(avp::ORIGIN_STATE_ID, self.local.origin_state_id);
        b.finish();
        self.flush_out();
    }

    /// Another connection claims this peer's identity: ask this one whether
    /// it is alive with a DWR, outside the watchdog's schedule.
    /// [`Action::Alive`] follows when the peer sends anything; the caller
    /// bounds the wait. `false` (nothing sent) when the connection is not
    /// open, so it cannot vouch for itself. A second probe while one is
    /// pending sends nothing more.
    pub fn probe(&mut self) -> bool {
        if self.state != PeerState::Open {
            return false;
        }
        if !self.probe_pending {
            self.probe_pending = true;
            self.send_dwr();
        }
        true
    }

    /// Time passed: CER/CEA/DPA waits and the watchdog.
    pub fn on_timer(&mut self, now: Instant) {
        match self.state {
            PeerState::Closed => {}
            PeerState::Open => match self.watchdog.on_timer(now) {
                WatchdogAction::None => {}
                WatchdogAction::SendDwr => self.send_dwr(),
                WatchdogAction::Suspect => {
                    self.actions
                        .push_back(Action::Watchdog(WatchdogState::Suspect));
                }
                WatchdogAction::Down => {
                    self.actions
                        .push_back(Action::Watchdog(WatchdogState::Down));
                    self.finish_with(CloseReason::WatchdogDown);
                }
            },
            PeerState::Closing => {
                if self.deadline.is_some_and(|d| now >= d) {
                    let cause = self.closing_cause;
                    self.finish_with(CloseReason::LocalDisconnect(cause));
                }
            }
            PeerState::WaitCer | PeerState::WaitCea | PeerState::Admitting => {
                if self.deadline.is_some_and(|d| now >= d) {
                    self.finish_with(CloseReason::CapabilitiesTimeout);
                }
            }
        }
    }

    /// Close gracefully: DPR with `cause` when open (then wait for the DPA,
    /// bounded by `dpa_timeout`); before open, close at once.
    pub fn close(&mut self, now: Instant, cause: DisconnectCause) {
        match self.state {
            PeerState::Open => {
                let (hbh, e2e) = self.next_ids();
                let mut b = MessageBuilder::new(
                    &mut self.out,
                    crate::codec::FLAG_R,
                    cmd::DISCONNECT_PEER,
                    app::DIAMETER_COMMON_MESSAGES,
                    hbh,
                    e2e,
                );
                b.origin(&self.local.origin_host, &self.local.origin_realm)
                    .i32(avp::DISCONNECT_CAUSE, cause.value());
                b.finish();
                self.flush_out();
                self.closing_cause = cause;
                self.state = PeerState::Closing;
                self.deadline = Some(now + self.settings.dpa_timeout);
            }
            PeerState::Closing | PeerState::Closed => {}
            PeerState::WaitCer | PeerState::WaitCea | PeerState::Admitting => {
                self.finish_with(CloseReason::LocalDisconnect(cause));
            }
        }
    }

    /// The transport closed or failed under us.
    pub fn transport_closed(&mut self) {
        self.finish_with(CloseReason::TransportClosed);
    }
}
