//! Diameter messages in pcap files (the classic libpcap format), both ways.
//!
//! Writing puts messages on one fake TCP connection (Ethernet, IPv4, TCP on
//! port 3868, a handshake first and a close last, sequence and
//! acknowledgement numbers and checksums all correct) so that Wireshark and
//! tshark decode and reassemble them exactly as captured traffic: an
//! independent check of our encoding, and a way to show a message to anyone
//! with Wireshark.
//!
//! Reading takes a capture (Ethernet, Linux cooked v1/v2, raw IP or BSD
//! loopback; IPv4 or IPv6; TCP), reassembles each direction of each TCP
//! connection by sequence number and splits the byte stream into Diameter
//! messages: what a `decode` command needs to read a pcap. pcapng files are
//! not read (`editcap -F pcap in.pcapng out.pcap` converts them).

use bytes::Bytes;
use diameter::codec::frame_len;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// The Diameter port (RFC 6733 §2.1).
pub const DIAMETER_PORT: u16 = 3868;

/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_NULL: u32 = 0;
const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_LINUX_SLL: u32 = 113;
const LINKTYPE_LINUX_SLL2: u32 = 276;

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const SNAPLEN: u32 = 262_144;

/// Largest TCP payload per written segment (Ethernet MTU minus IPv4 and TCP headers).
const MSS: usize = 1460;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;

/// Largest message the reader accepts before declaring a stream unframeable.
const MAX_MESSAGE_LEN: u32 = 1 << 24;

/// Which way a written message travels on the fake connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the peer that opened the connection (e.g. a PCEF) to the listener.
    ToServer,
    /// From the listener (e.g. the PCRF) back to the connecting peer.
    ToClient,
}

/// Writes Diameter messages as one TCP connection in a pcap file.
///
/// [`PcapWriter::new`] writes the file header and the TCP handshake;
/// [`PcapWriter::finish`] writes the FIN exchange and returns the output.
pub struct PcapWriter<W: Write> {
    out: W,
    client: SocketAddrV4,
    server: SocketAddrV4,
    /// Next sequence number sent by the client and by the server.
    client_seq: u32,
    server_seq: u32,
    /// Timestamp of the next packet, since the Unix epoch.
    time: Duration,
    /// Time added after each packet.
    step: Duration,
    ip_id: u16,
}

impl<W: Write> PcapWriter<W> {
    /// Starts a capture of a connection from `client` to `server`. Packet
    /// times start at 2026-01-01T00:00:00Z and advance by one millisecond per
    /// packet (see [`set_time`](Self::set_time)), so output is reproducible.
    pub fn new(mut out: W, client: SocketAddrV4, server: SocketAddrV4) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_MICROS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        let mut w = PcapWriter {
            out,
            client,
            server,
            client_seq: 0x1000_0000,
            server_seq: 0x2000_0000,
            time: Duration::from_secs(1_767_225_600),
            step: Duration::from_millis(1),
            ip_id: 1,
        };
        w.segment(Direction::ToServer, TCP_SYN, &[])?;
        w.segment(Direction::ToClient, TCP_SYN | TCP_ACK, &[])?;
        w.segment(Direction::ToServer, TCP_ACK, &[])?;
        Ok(w)
    }

    /// The default: a client at 127.0.0.1:40000 talking to 127.0.0.2:3868.
    pub fn loopback(out: W) -> io::Result<Self> {
        Self::new(
            out,
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 40_000),
            SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), DIAMETER_PORT),
        )
    }

    /// Sets the timestamp of the next packet (since the Unix epoch).
    pub fn set_time(&mut self, t: Duration) -> &mut Self {
        self.time = t;
        self
    }

    /// Writes one encoded Diameter message (or any bytes: the stream is
    /// what it is) in as many segments as the MSS requires.
    pub fn message(&mut self, dir: Direction, msg: &[u8]) -> io::Result<()> {
        for chunk in msg.chunks(MSS) {
            self.segment(dir, TCP_PSH | TCP_ACK, chunk)?;
        }
        Ok(())
    }

    /// Closes the connection (FIN from the client, FIN from the server, last
    /// ACK), flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.segment(Direction::ToServer, TCP_FIN | TCP_ACK, &[])?;
        self.segment(Direction::ToClient, TCP_FIN | TCP_ACK, &[])?;
        self.segment(Direction::ToServer, TCP_ACK, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn segment(&mut self, dir: Direction, flags: u8, payload: &[u8]) -> io::Result<()> {
        let (src, dst, seq, ack) = match dir {
            Direction::ToServer => (self.client, self.server, self.client_seq, self.server_seq),
            Direction::ToClient => (self.server, self.client, self.server_seq, self.client_seq),
        };
        // SYN and FIN each take one sequence number.
        let used = payload.len() as u32 + u32::from(flags & (TCP_SYN | TCP_FIN) != 0);
        match dir {
            Direction::ToServer => self.client_seq = self.client_seq.wrapping_add(used),
            Direction::ToClient => self.server_seq = self.server_seq.wrapping_add(used),
        }
        // A first SYN acknowledges nothing.
        let (ack, flags) = if flags == TCP_SYN {
            (0, flags)
        } else {
            (ack, flags)
        };

        let mut tcp = Vec::with_capacity(20 + payload.len());
        tcp.extend_from_slice(&src.port().to_be_bytes());
        tcp.extend_from_slice(&dst.port().to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.push(5 << 4); // data offset: 5 words, no options
        tcp.push(flags);
        tcp.extend_from_slice(&65_535u16.to_be_bytes()); // window
        tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::with_capacity(12 + tcp.len());
        pseudo.extend_from_slice(&src.ip().octets());
        pseudo.extend_from_slice(&dst.ip().octets());
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&tcp);
        let sum = internet_checksum(&pseudo);
        tcp[16..18].copy_from_slice(&sum.to_be_bytes());

        let mut ip = Vec::with_capacity(20);
        ip.push(0x45); // version 4, 5-word header
        ip.push(0); // DSCP/ECN
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&self.ip_id.to_be_bytes());
        ip.extend_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
        ip.push(64); // TTL
        ip.push(6); // TCP
        ip.extend_from_slice(&[0, 0]); // checksum
        ip.extend_from_slice(&src.ip().octets());
        ip.extend_from_slice(&dst.ip().octets());
        let sum = internet_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        self.ip_id = self.ip_id.wrapping_add(1);

        let mut frame = Vec::with_capacity(14 + ip.len() + tcp.len());
        frame.extend_from_slice(&fake_mac(*dst.ip()));
        frame.extend_from_slice(&fake_mac(*src.ip()));
        frame.extend_from_slice(&0x0800u16.to_be_bytes());
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&tcp);

        let mut rec = Vec::with_capacity(16);
        rec.extend_from_slice(&(self.time.as_secs() as u32).to_le_bytes());
        rec.extend_from_slice(&self.time.subsec_micros().to_le_bytes());
        rec.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        rec.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(&frame)?;
        self.time += self.step;
        Ok(())
    }
}

/// A locally administered MAC address derived from an IPv4 address.
fn fake_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// The one's-complement sum of RFC 1071, as IPv4 and TCP use it.
fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One direction of one TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.src, self.dst)
    }
}

/// One Diameter message found in a capture.
#[derive(Clone, Debug)]
pub struct CapturedMessage {
    pub flow: Flow,
    /// Time of the packet that completed the message, since the Unix epoch.
    pub time: Duration,
    /// The encoded message, exactly as it crossed the wire.
    pub bytes: Bytes,
}

/// Something in a capture that could not be turned into messages; the rest
/// of the capture is still read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamProblem {
    pub flow: Flow,
    pub what: String,
}

impl fmt::Display for StreamProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flow, self.what)
    }
}

/// What a capture held.
#[derive(Clone, Debug, Default)]
pub struct Capture {
    /// Messages in the order they were completed.
    pub messages: Vec<CapturedMessage>,
    /// Streams, or parts of streams, that were not Diameter or were not whole.
    pub problems: Vec<StreamProblem>,
}

/// Why a file cannot be read as a pcap at all.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("not a pcap file (magic {0:#010x}); pcapng is not supported, convert with `editcap -F pcap`")]
    BadMagic(u32),
    #[error("unsupported pcap link type {0}")]
    LinkType(u32),
    #[error("pcap file truncated at byte {0}")]
    Truncated(usize),
}

/// Reads every Diameter message carried over TCP in a pcap file's bytes.
pub fn read_pcap(data: &[u8]) -> Result<Capture, PcapError> {
    let magic_le = read_u32(data, 0, true).ok_or(PcapError::Truncated(0))?;
    let (le, nanos) = match magic_le {
        MAGIC_MICROS => (true, false),
        MAGIC_NANOS => (true, true),
        m if m.swap_bytes() == MAGIC_MICROS => (false, false),
        m if m.swap_bytes() == MAGIC_NANOS => (false, true),
        m => return Err(PcapError::BadMagic(m)),
    };
    let linktype = read_u32(data, 20, le).ok_or(PcapError::Truncated(data.len()))?;
    // The low 16 bits are the link type; the high bits may carry FCS information.
    let linktype = linktype & 0xffff;
    if !matches!(
        linktype,
        LINKTYPE_ETHERNET | LINKTYPE_NULL | LINKTYPE_RAW | LINKTYPE_LINUX_SLL | LINKTYPE_LINUX_SLL2
    ) {
        return Err(PcapError::LinkType(linktype));
    }

    let mut streams: HashMap<Flow, Stream> = HashMap::new();
    let mut order: Vec<Flow> = Vec::new();
    let mut cap = Capture::default();
    let mut pos = 24;
    while pos < data.len() {
        let rec = data.get(pos..pos + 16).ok_or(PcapError::Truncated(pos))?;
        let secs = read_u32(rec, 0, le).unwrap_or(0);
        let frac = read_u32(rec, 4, le).unwrap_or(0);
        let incl = read_u32(rec, 8, le).unwrap_or(0) as usize;
        let frame = data
            .get(pos + 16..pos + 16 + incl)
            .ok_or(PcapError::Truncated(pos))?;
        pos += 16 + incl;
        let time = Duration::from_secs(u64::from(secs))
            + if nanos {
                Duration::from_nanos(u64::from(frac))
            } else {
                Duration::from_micros(u64::from(frac))
            };
        let Some(seg) = link_payload(linktype, frame).and_then(ip_tcp) else {
            continue;
        };
        let stream = streams.entry(seg.flow).or_insert_with(|| {
            order.push(seg.flow);
            Stream::default()
        });
        stream.segment(&seg, time, &mut cap);
    }
    for flow in order {
        if let Some(s) = streams.get(&flow) {
            s.finish(flow, &mut cap);
        }
    }
    Ok(cap)
}

fn read_u32(b: &[u8], at: usize, le: bool) -> Option<u32> {
    let a: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    })
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The network-layer packet inside a link-layer frame, with its EtherType.
fn link_payload(linktype: u32, frame: &[u8]) -> Option<(u16, &[u8])> {
    let (mut ethertype, mut rest) = match linktype {
        LINKTYPE_ETHERNET => (be16(frame, 12)?, frame.get(14..)?),
        LINKTYPE_LINUX_SLL => (be16(frame, 14)?, frame.get(16..)?),
        LINKTYPE_LINUX_SLL2 => (be16(frame, 0)?, frame.get(20..)?),
        LINKTYPE_RAW => {
            let v = frame.first()? >> 4;
            (if v == 6 { 0x86dd } else { 0x0800 }, frame)
        }
        LINKTYPE_NULL => {
            // The address family is in the capturing host's byte order.
            let fam = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?);
            let fam = if fam > 0xffff { fam.swap_bytes() } else { fam };
            let et = match fam {
                2 => 0x0800,
                24 | 28 | 30 => 0x86dd,
                _ => return None,
            };
            (et, frame.get(4..)?)
        }
        _ => return None,
    };
    // 802.1Q / 802.1ad tags.
    while matches!(ethertype, 0x8100 | 0x88a8) {
        ethertype = be16(rest, 2)?;
        rest = rest.get(4..)?;
    }
    Some((ethertype, rest))
}

/// One TCP segment.
struct Segment<'a> {
    flow: Flow,
    seq: u32,
    flags: u8,
    payload: &'a [u8],
    /// The payload the IP header announced was cut by the capture's snap length.
    truncated: bool,
}

fn ip_tcp((ethertype, pkt): (u16, &[u8])) -> Option<Segment<'_>> {
    let (src, dst, tcp, announced) = match ethertype {
        0x0800 => {
            let ihl = usize::from(pkt.first()? & 0x0f) * 4;
            let total = usize::from(be16(pkt, 2)?);
            let frag = be16(pkt, 6)?;
            // Fragments other than whole datagrams are not reassembled.
            if *pkt.get(9)? != 6 || frag & 0x3fff != 0 || ihl < 20 {
                return None;
            }
            let src: [u8; 4] = pkt.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = pkt.get(16..20)?.try_into().ok()?;
            // A capture of segmentation-offloaded packets shows length 0.
            let total = if total == 0 { pkt.len() } else { total };
            let end = total.min(pkt.len());
            (
                IpAddr::from(src),
                IpAddr::from(dst),
                pkt.get(ihl..end)?,
                total.checked_sub(ihl)?,
            )
        }
        0x86dd => {
            // Only TCP directly after the fixed header (no extension headers).
            if *pkt.get(6)? != 6 {
                return None;
            }
            let plen = usize::from(be16(pkt, 4)?);
            let src: [u8; 16] = pkt.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = pkt.get(24..40)?.try_into().ok()?;
            let end = (40 + plen).min(pkt.len());
            (
                IpAddr::from(Ipv6Addr::from(src)),
                IpAddr::from(Ipv6Addr::from(dst)),
                pkt.get(40..end)?,
                plen,
            )
        }
        _ => return None,
    };
    let sport = be16(tcp, 0)?;
    let dport = be16(tcp, 2)?;
    let seq = u32::from_be_bytes(tcp.get(4..8)?.try_into().ok()?);
    let off = usize::from(tcp.get(12)? >> 4) * 4;
    let flags = *tcp.get(13)?;
    let payload = tcp.get(off..)?;
    Some(Segment {
        flow: Flow {
            src: SocketAddr::new(src, sport),
            dst: SocketAddr::new(dst, dport),
        },
        seq,
        flags,
        payload,
        truncated: announced > tcp.len(),
    })
}

/// Reassembly and framing state of one direction of a connection.
#[derive(Default)]
struct Stream {
    /// Sequence number of stream offset 0, once known.
    base: Option<u32>,
    /// Stream offset of the next byte expected.
    next: u32,
    /// Segments that arrived ahead of a gap, by stream offset.
    ahead: BTreeMap<u32, Vec<u8>>,
    /// Received bytes not yet framed into a whole message.
    buf: Vec<u8>,
    /// Framing failed: the rest of this stream cannot be trusted.
    broken: bool,
}

impl Stream {
    fn segment(&mut self, seg: &Segment<'_>, time: Duration, cap: &mut Capture) {
        if seg.flags & TCP_RST != 0 {
            return;
        }
        let base = match self.base {
            Some(b) => b,
            None => {
                // A SYN takes one sequence number before the data.
                let b = if seg.flags & TCP_SYN != 0 {
                    seg.seq.wrapping_add(1)
                } else {
                    seg.seq
                };
                self.base = Some(b);
                b
            }
        };
        if self.broken || seg.payload.is_empty() {
            return;
        }
        if seg.truncated {
            self.fail(
                seg.flow,
                "a segment was cut short by the capture's snap length",
                cap,
            );
            return;
        }
        let off = seg.seq.wrapping_sub(base);
        let end = off.wrapping_add(seg.payload.len() as u32);
        // Wholly old data (a retransmission) is dropped; the new tail of a
        // partly old segment is kept.
        if end.wrapping_sub(self.next) as i32 <= 0 {
            return;
        }
        if off.wrapping_sub(self.next) as i32 > 0 {
            self.ahead.insert(off, seg.payload.to_vec());
            return;
        }
        let skip = self.next.wrapping_sub(off) as usize;
        self.buf.extend_from_slice(&seg.payload[skip..]);
        self.next = end;
        // Segments that waited for this one.
        while let Some((&o, _)) = self.ahead.first_key_value() {
            if o.wrapping_sub(self.next) as i32 > 0 {
                break;
            }
            let Some((o, data)) = self.ahead.pop_first() else {
                break;
            };
            let e = o.wrapping_add(data.len() as u32);
            if e.wrapping_sub(self.next) as i32 > 0 {
                let skip = self.next.wrapping_sub(o) as usize;
                self.buf.extend_from_slice(&data[skip..]);
                self.next = e;
            }
        }
        self.frame(seg.flow, time, cap);
    }

    fn frame(&mut self, flow: Flow, time: Duration, cap: &mut Capture) {
        let mut at = 0;
        loop {
            match frame_len(&self.buf[at..], MAX_MESSAGE_LEN) {
                Ok(Some(n)) if self.buf.len() - at >= n => {
                    cap.messages.push(CapturedMessage {
                        flow,
                        time,
                        bytes: Bytes::copy_from_slice(&self.buf[at..at + n]),
                    });
                    at += n;
                }
                Ok(_) => break,
                Err(e) => {
                    let what = format!("not Diameter at stream byte {}: {e}", self.consumed(at));
                    self.buf.drain(..at);
                    self.fail(flow, &what, cap);
                    return;
                }
            }
        }
        self.buf.drain(..at);
    }

    /// Stream offset of position `at` in the unframed buffer.
    fn consumed(&self, at: usize) -> u64 {
        u64::from(self.next) - self.buf.len() as u64 + at as u64
    }

    fn fail(&mut self, flow: Flow, what: &str, cap: &mut Capture) {
        self.broken = true;
        self.buf.clear();
        self.ahead.clear();
        cap.problems.push(StreamProblem {
            flow,
            what: what.to_owned(),
        });
    }

    fn finish(&self, flow: Flow, cap: &mut Capture) {
        if self.broken {
            return;
        }
        if !self.ahead.is_empty() {
            cap.problems.push(StreamProblem {
                flow,
                what: format!(
                    "{} bytes after a gap in the capture were not read",
                    self.ahead.values().map(Vec::len).sum::<usize>()
                ),
            });
        } else if !self.buf.is_empty() {
            cap.problems.push(StreamProblem {
                flow,
                what: format!(
                    "the capture ends inside a message ({} bytes of it seen)",
                    self.buf.len()
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use diameter::codec::{Message, MessageBuilder};
    use diameter::dict::{app, avp, cmd};

    fn dwr(hbh: u32, pad: usize) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::new(
            &mut buf,
            diameter::codec::FLAG_R,
            cmd::DEVICE_WATCHDOG,
            app::DIAMETER_COMMON_MESSAGES,
            hbh,
            hbh,
        );
        b.origin("pcef.example", "example");
        if pad > 0 {
            b.bytes(avp::CLASS, &vec![0xab; pad]);
        }
        b.finish();
        buf.to_vec()
    }

    fn write(msgs: &[(Direction, Vec<u8>)]) -> Vec<u8> {
        let mut w = PcapWriter::loopback(Vec::new()).expect("header");
        for (d, m) in msgs {
            w.message(*d, m).expect("write");
        }
        w.finish().expect("finish")
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        // A header with its checksum in place sums to zero.
        let hdr = [
            0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8,
            0, 0xc7,
        ];
        assert_eq!(internet_checksum(&hdr), 0);
    }

    #[test]
    fn round_trip_both_directions_and_segmentation() {
        let req = dwr(1, 0);
        let big = dwr(2, 4000); // three segments
        let msgs = vec![
            (Direction::ToServer, req.clone()),
            (Direction::ToClient, big.clone()),
            (Direction::ToServer, dwr(3, 10)),
        ];
        let file = write(&msgs);
        assert_eq!(&file[..4], &MAGIC_MICROS.to_le_bytes());
        let cap = read_pcap(&file).expect("readable");
        assert!(cap.problems.is_empty(), "{:?}", cap.problems);
        assert_eq!(cap.messages.len(), 3);
        for (got, (dir, want)) in cap.messages.iter().zip(&msgs) {
            assert_eq!(&got.bytes[..], &want[..]);
            let to_server = got.flow.dst.port() == DIAMETER_PORT;
            assert_eq!(to_server, *dir == Direction::ToServer);
            Message::parse(got.bytes.clone()).expect("parses");
        }
        assert!(cap.messages[0].time < cap.messages[2].time);
    }

    /// Splits a written file into its records, to rearrange them.
    fn records(file: &[u8]) -> Vec<&[u8]> {
        let mut v = Vec::new();
        let mut pos = 24;
        while pos < file.len() {
            let n = read_u32(file, pos + 8, true).expect("len") as usize;
            v.push(&file[pos..pos + 16 + n]);
            pos += 16 + n;
        }
        v
    }

    #[test]
    fn reorders_and_drops_retransmissions() {
        let big = dwr(7, 3000); // three segments
        let file = write(&[(Direction::ToServer, big.clone())]);
        let recs = records(&file);
        // 3 handshake, 3 data, 3 close.
        assert_eq!(recs.len(), 9);
        let mut out = file[..24].to_vec();
        for i in [0, 1, 2, 5, 3, 3, 4, 5, 6, 7, 8] {
            out.extend_from_slice(recs[i]);
        }
        let cap = read_pcap(&out).expect("readable");
        assert!(cap.problems.is_empty(), "{:?}", cap.problems);
        assert_eq!(cap.messages.len(), 1);
        assert_eq!(&cap.messages[0].bytes[..], &big[..]);
    }

    #[test]
    fn reports_gaps_and_non_diameter_streams() {
        let file = write(&[(Direction::ToServer, dwr(7, 3000))]);
        let recs = records(&file);
        let mut out = file[..24].to_vec();
        for i in [0, 1, 2, 3, 5, 6, 7, 8] {
            out.extend_from_slice(recs[i]);
        }
        let cap = read_pcap(&out).expect("readable");
        assert!(cap.messages.is_empty());
        assert_eq!(cap.problems.len(), 1);
        assert!(cap.problems[0].what.contains("gap"), "{}", cap.problems[0]);

        let file = write(&[(Direction::ToClient, b"GET / HTTP/1.1\r\n\r\n".to_vec())]);
        let cap = read_pcap(&file).expect("readable");
        assert_eq!(cap.problems.len(), 1);
        assert_eq!(cap.problems[0].flow.src.port(), DIAMETER_PORT);
        assert!(cap.problems[0].what.contains("not Diameter"));

        let mut half = dwr(1, 0);
        half.truncate(30);
        let cap = read_pcap(&write(&[(Direction::ToServer, half)])).expect("readable");
        assert!(cap.problems[0].what.contains("ends inside a message"));
    }

    #[test]
    fn reads_offloaded_ipv4_with_zero_total_length() {
        let msg = dwr(4, 0);
        let file = write(&[(Direction::ToServer, msg.clone())]);
        let mut recs: Vec<Vec<u8>> = records(&file).into_iter().map(<[u8]>::to_vec).collect();
        // The data segment (after the handshake): IPv4 total length at 16 + 14 + 2.
        recs[3][16 + 14 + 2] = 0;
        recs[3][16 + 14 + 3] = 0;
        let mut out = file[..24].to_vec();
        for r in &recs {
            out.extend_from_slice(r);
        }
        let cap = read_pcap(&out).expect("readable");
        assert!(cap.problems.is_empty(), "{:?}", cap.problems);
        assert_eq!(cap.messages.len(), 1);
        assert_eq!(&cap.messages[0].bytes[..], &msg[..]);
    }

    #[test]
    fn rejects_non_pcap_and_truncated_files() {
        assert!(matches!(
            read_pcap(&[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0]),
            Err(PcapError::BadMagic(_))
        ));
        let file = write(&[(Direction::ToServer, dwr(1, 0))]);
        assert!(matches!(
            read_pcap(&file[..file.len() - 3]),
            Err(PcapError::Truncated(_))
        ));
        let mut other = file.clone();
        other[20] = 105; // IEEE 802.11
        assert!(matches!(read_pcap(&other), Err(PcapError::LinkType(105))));
    }

    #[test]
    fn reads_big_endian_nanosecond_raw_ipv6() {
        // Build one raw-IPv6 packet by hand, in a big-endian nanosecond file.
        let msg = dwr(9, 0);
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&3868u16.to_be_bytes());
        tcp.extend_from_slice(&50_000u16.to_be_bytes());
        tcp.extend_from_slice(&77u32.to_be_bytes());
        tcp.extend_from_slice(&0u32.to_be_bytes());
        tcp.extend_from_slice(&[0x50, TCP_PSH | TCP_ACK, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(&msg);
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[6, 64]);
        ip.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        ip.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        ip.extend_from_slice(&tcp);
        let mut file = Vec::new();
        file.extend_from_slice(&MAGIC_NANOS.to_be_bytes());
        file.extend_from_slice(&[0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0]);
        file.extend_from_slice(&LINKTYPE_RAW.to_be_bytes());
        file.extend_from_slice(&5u32.to_be_bytes());
        file.extend_from_slice(&7u32.to_be_bytes());
        file.extend_from_slice(&(ip.len() as u32).to_be_bytes());
        file.extend_from_slice(&(ip.len() as u32).to_be_bytes());
        file.extend_from_slice(&ip);
        let cap = read_pcap(&file).expect("readable");
        assert!(cap.problems.is_empty(), "{:?}", cap.problems);
        assert_eq!(cap.messages.len(), 1);
        assert_eq!(&cap.messages[0].bytes[..], &msg[..]);
        assert_eq!(cap.messages[0].time, Duration::new(5, 7));
        assert!(cap.messages[0].flow.src.is_ipv6());
    }
}
