//! A client's paths' `remote` host names, resolved again while it runs (dynamic DNS), for
//! `braid up` and for the clients of `braid send` and `braid forward` alike.
//!
//! The system's resolver blocks, so the lookups run in a thread of their own; the event loop
//! asks ([`Resolver::turn`]) and takes the answers on its next turns. A name is resolved
//! again every [`RESOLVE_UP_EVERY`] while its path is up; at once when the path goes down or
//! the server answers from an address not seen before ([`Resolver::stray`]), then after
//! [`RESOLVE_DOWN_FIRST`], doubling up to [`RESOLVE_UP_EVERY`]. A path moves only when its
//! address drops out of the answer, and keeps its IP version.

use crate::config::{self, Config, PathConfig};
use crate::Warnings;
use braid_proto::time::{Duration, Instant};
use braid_session::Role;
use std::io;
use std::net::SocketAddr;

/// How often a client resolves a path's `remote` host name again while the path is up.
pub const RESOLVE_UP_EVERY: Duration = Duration::from_secs(60);

/// When a path with a host name goes down (its server's address may have changed: dynamic
/// DNS), its name is resolved again at once, then after this long, then twice as long each
/// time, up to [`RESOLVE_UP_EVERY`].
pub const RESOLVE_DOWN_FIRST: Duration = Duration::from_secs(2);

/// Client: the paths' `remote` host names, resolved again at run time in a thread of its own
/// (the system's resolver blocks), so a server whose address changes (dynamic DNS) is found
/// again without a restart.
pub(crate) struct Resolver {
    ask: std::sync::mpsc::Sender<(usize, String, u16)>,
    answers: std::sync::mpsc::Receiver<(usize, io::Result<Vec<SocketAddr>>)>,
    paths: Vec<ResolvedPath>,
}

/// One path's part of the [`Resolver`].
#[derive(Clone)]
struct ResolvedPath {
    /// When to ask next.
    next: Instant,
    /// How long to wait after that while the path is down.
    down_every: Duration,
    /// When it was last asked (`None`: only resolved with the config, at start).
    last_asked: Option<Instant>,
    /// The first scheduled look has happened (one that finds the path up asks nothing: the
    /// config resolved the name moments before).
    looked: bool,
    /// An answer is awaited.
    asked: bool,
    /// The path was up when last looked at.
    was_up: bool,
    /// Asked to hurry: ask at the next look even if the path is up and was resolved at start.
    hurried: bool,
    /// The last address other than the path's own that the server answered from.
    stray_source: Option<SocketAddr>,
}

impl ResolvedPath {
    /// Ask soon (the path went down, or the server answers from another address), unless it
    /// was asked less than [`RESOLVE_DOWN_FIRST`] ago: a flapping path or a stream of
    /// datagrams does not make a query each. Whether it will ask.
    fn hurry(&mut self, now: Instant) -> bool {
        let due = self
            .last_asked
            .is_none_or(|t| now.saturating_duration_since(t) >= RESOLVE_DOWN_FIRST);
        if due {
            self.next = now;
            self.down_every = RESOLVE_DOWN_FIRST;
            self.hurried = true;
        }
        due
    }

    /// The server answered on this path from `source`, not the address the path sends to:
    /// it may have moved. Only a source not seen before hurries the lookup, so a server that
    /// always answers from another of its addresses (several interfaces, IPv6 temporary
    /// addresses) does not make a query every few seconds.
    fn stray(&mut self, now: Instant, source: SocketAddr) {
        if self.stray_source != Some(source) && self.hurry(now) {
            self.stray_source = Some(source);
        }
    }
}

impl Resolver {
    /// A resolver for `cfg`'s paths, if any of them has a host name (a client's).
    pub(crate) fn start(cfg: &Config) -> Option<Resolver> {
        Resolver::start_with(cfg, config::resolve)
    }

    /// [`Resolver::start`], looking names up with `lookup` (the tests' stand-in for DNS).
    fn start_with(
        cfg: &Config,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + 'static,
    ) -> Option<Resolver> {
        if cfg.role != Role::Initiator || cfg.paths.iter().all(|p| p.remote_host.is_none()) {
            return None;
        }
        let (ask, asked_for) = std::sync::mpsc::channel::<(usize, String, u16)>();
        let (tell, answers) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("braid-resolve".into())
            .spawn(move || {
                for (i, host, port) in asked_for {
                    if tell.send((i, lookup(&host, port))).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            eprintln!("braid: warning: cannot start the thread that resolves the paths' host names again ({e}): each path keeps the address it resolved to at start");
            return None;
        }
        let path = ResolvedPath {
            next: Instant::ZERO + RESOLVE_DOWN_FIRST,
            down_every: RESOLVE_DOWN_FIRST,
            last_asked: None,
            looked: false,
            asked: false,
            was_up: false,
            hurried: false,
            stray_source: None,
        };
        Some(Resolver {
            ask,
            answers,
            paths: vec![path; cfg.paths.len()],
        })
    }

    /// Take what the lookups found (a changed address is said, and the path's datagrams go
    /// to `slots[i]`, now the new address, from now on), and ask again for the paths due.
    /// `paths` are the config's, `slots` each path's remote address now, `up(i)` whether path
    /// `i` is up; a lookup that fails is said through `warnings`, once a minute per path.
    pub(crate) fn turn(
        &mut self,
        now: Instant,
        paths: &[PathConfig],
        slots: &mut [Option<SocketAddr>],
        up: impl Fn(usize) -> bool,
        warnings: &mut Warnings,
    ) {
        while let Ok((i, found)) = self.answers.try_recv() {
            let (Some(p), Some(slot), Some(rp)) =
                (paths.get(i), slots.get_mut(i), self.paths.get_mut(i))
            else {
                continue;
            };
            rp.asked = false;
            let Some((host, _)) = &p.remote_host else {
                continue;
            };
            let v6 = p.remote.is_ipv6();
            let picked = found
                .as_ref()
                .ok()
                .and_then(|f| config::pick_remote(*slot, f, Some(v6)));
            match (picked, found) {
                (Some(a), _) if Some(a) == *slot => {}
                (Some(a), _) => {
                    eprintln!(
                        "braid: path `{}`: {host} now resolves to {a} (was {}): sending there",
                        p.name,
                        slot.map_or("none".into(), |s| s.to_string())
                    );
                    *slot = Some(a);
                    rp.stray_source = None;
                }
                (None, found) => {
                    let why = match found {
                        Ok(f) if f.is_empty() => "no address".to_owned(),
                        Ok(f) => format!(
                            "no {} address, only {}",
                            if v6 { "IPv6" } else { "IPv4" },
                            f.iter()
                                .map(|a| a.ip().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        Err(e) => e.to_string(),
                    };
                    warnings.say_for(now, "resolve", i, || {
                        format!(
                            "path `{}`: cannot resolve {host} again ({why}): still sending to {}",
                            p.name,
                            slot.map_or("none".into(), |s| s.to_string())
                        )
                    });
                }
            }
        }
        for (i, p) in paths.iter().enumerate() {
            let (Some((host, port)), Some(rp)) = (&p.remote_host, self.paths.get_mut(i)) else {
                continue;
            };
            let up = up(i);
            if std::mem::replace(&mut rp.was_up, up) && !up {
                // Just went down: perhaps the server moved.
                let _ = rp.hurry(now);
            }
            if rp.asked || now < rp.next {
                continue;
            }
            if up {
                rp.down_every = RESOLVE_DOWN_FIRST;
                rp.next = now + RESOLVE_UP_EVERY;
                if !std::mem::replace(&mut rp.looked, true) && !rp.hurried {
                    // Resolved with the config moments ago, and the path works.
                    continue;
                }
            } else {
                rp.next = now + rp.down_every;
                rp.down_every = (rp.down_every * 2).min(RESOLVE_UP_EVERY);
            }
            rp.last_asked = Some(now);
            rp.hurried = false;
            rp.asked = self.ask.send((i, host.clone(), *port)).is_ok();
        }
    }

    /// The server answered on path `i` from `source`, not the address the path sends to: if
    /// the path's `remote` is a host name, the server may have moved ([`ResolvedPath::stray`]).
    pub(crate) fn stray(&mut self, i: usize, now: Instant, source: SocketAddr) {
        if let Some(rp) = self.paths.get_mut(i) {
            rp.stray(now, source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    /// What the stand-in DNS answers, and how many times it was asked.
    type Dns = Arc<Mutex<(io::Result<Vec<SocketAddr>>, u32)>>;

    /// A client of two paths, the first to `localhost` (which the config resolves from
    /// /etc/hosts), and a resolver on `dns`.
    fn client(dns: &Dns) -> (Config, Resolver) {
        let text = r#"
role = "client"
private_key = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
peer_public_key = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
[interface]
address = ["10.77.0.2/30"]
[[path]]
name = "dsl"
remote = "localhost:7000"
rate_mbit = 20
[[path]]
name = "lte"
remote = "192.0.2.1:7000"
rate_mbit = 5
"#;
        let cfg = Config::parse(text, Path::new("braid.toml")).unwrap();
        let dns = dns.clone();
        let r = Resolver::start_with(&cfg, move |host, port| {
            assert_eq!((host, port), ("localhost", 7000));
            let mut d = dns.lock().unwrap();
            d.1 += 1;
            match &d.0 {
                Ok(a) => Ok(a.clone()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            }
        })
        .unwrap();
        (cfg, r)
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    /// Runs the resolver's turn at `now` until no answer is awaited (the lookup thread is
    /// real): the slots after it.
    fn turn(
        r: &mut Resolver,
        cfg: &Config,
        now: Instant,
        slots: &mut [Option<SocketAddr>],
        up: bool,
    ) {
        let mut w = Warnings::default();
        for _ in 0..2000 {
            r.turn(now, &cfg.paths, slots, |_| up, &mut w);
            if !r.paths.iter().any(|p| p.asked) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("no answer from the lookup thread");
    }

    #[test]
    fn a_name_is_looked_up_again_when_its_path_goes_down_or_the_server_answers_from_elsewhere() {
        let dns: Dns = Arc::new(Mutex::new((Ok(vec![addr("127.0.0.1:7000").unwrap()]), 0)));
        let (cfg, mut r) = client(&dns);
        let mut slots = vec![addr("127.0.0.1:7000"), addr("192.0.2.1:7000")];
        let s = |secs: u64| Instant::ZERO + Duration::from_secs(secs);
        // Up, and resolved with the config moments ago: the first look asks nothing, and
        // the next is a minute later.
        turn(&mut r, &cfg, s(0), &mut slots, true);
        turn(&mut r, &cfg, s(2), &mut slots, true);
        turn(&mut r, &cfg, s(30), &mut slots, true);
        assert_eq!(dns.lock().unwrap().1, 0);
        turn(&mut r, &cfg, s(62), &mut slots, true);
        assert_eq!(dns.lock().unwrap().1, 1, "a minute after the first look");
        // The server moves and the path goes down: asked at once, and the path follows.
        dns.lock().unwrap().0 = Ok(vec![addr("127.0.0.2:7000").unwrap()]);
        turn(&mut r, &cfg, s(70), &mut slots, false);
        assert_eq!(dns.lock().unwrap().1, 2);
        assert_eq!(slots, vec![addr("127.0.0.2:7000"), addr("192.0.2.1:7000")]);
        // Still down: again after 2 s, then 4 s, doubling.
        turn(&mut r, &cfg, s(71), &mut slots, false);
        assert_eq!(dns.lock().unwrap().1, 2);
        turn(&mut r, &cfg, s(72), &mut slots, false);
        assert_eq!(dns.lock().unwrap().1, 3);
        turn(&mut r, &cfg, s(75), &mut slots, false);
        assert_eq!(dns.lock().unwrap().1, 3);
        turn(&mut r, &cfg, s(76), &mut slots, false);
        assert_eq!(dns.lock().unwrap().1, 4);
        // Up again. The server answers from an address not seen before: asked at the next
        // turn, once; the same stray source again asks nothing.
        turn(&mut r, &cfg, s(80), &mut slots, true);
        let asked = dns.lock().unwrap().1;
        r.stray(0, s(90), addr("127.0.0.9:7000").unwrap());
        turn(&mut r, &cfg, s(90), &mut slots, true);
        assert_eq!(dns.lock().unwrap().1, asked + 1);
        r.stray(0, s(95), addr("127.0.0.9:7000").unwrap());
        turn(&mut r, &cfg, s(95), &mut slots, true);
        assert_eq!(dns.lock().unwrap().1, asked + 1);
        // A path whose address is still in the answer stays where it is; a failed lookup or
        // an answer of the other IP version leaves it too.
        dns.lock().unwrap().0 = Ok(vec![
            addr("127.0.0.3:7000").unwrap(),
            addr("127.0.0.2:7000").unwrap(),
        ]);
        turn(&mut r, &cfg, s(200), &mut slots, false);
        assert_eq!(slots[0], addr("127.0.0.2:7000"));
        dns.lock().unwrap().0 = Err(io::Error::other("SERVFAIL"));
        turn(&mut r, &cfg, s(400), &mut slots, false);
        assert_eq!(slots[0], addr("127.0.0.2:7000"));
        dns.lock().unwrap().0 = Ok(vec![addr("[::1]:7000").unwrap()]);
        turn(&mut r, &cfg, s(600), &mut slots, false);
        assert_eq!(slots[0], addr("127.0.0.2:7000"));
        // The path with an address was never looked up.
        assert_eq!(slots[1], addr("192.0.2.1:7000"));
    }
}
