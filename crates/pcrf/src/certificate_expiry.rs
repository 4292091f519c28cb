//! When the TLS certificates our listeners serve expire, as the gauge
//! `pcrf_tls_certificate_expiry_timestamp_seconds{listener}`: once a
//! certificate has expired every peer refuses the handshake, so operators
//! alert on it weeks ahead (deploy/prometheus/pcrf-alerts.yml). The date is
//! read from the certificate file when the listener loads it, at start (a
//! new certificate takes a restart, docs/tls.md); the family is always in
//! the scrape, without samples when no listener serves TLS.

use crate::metrics::{Exposition, Kind, MetricsSource};
use std::path::Path;
use x509_parser::pem::Pem;

/// The family's name, as docs/metrics.md lists it.
pub const FAMILY: &str = "pcrf_tls_certificate_expiry_timestamp_seconds";

/// The notAfter of the first certificate in a PEM file (the end-entity
/// one: chains are written leaf first), Unix seconds.
pub fn not_after(path: &Path) -> Result<i64, String> {
    let shown = path.display();
    let data = std::fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    for pem in Pem::iter_from_buffer(&data) {
        let pem = pem.map_err(|e| format!("{shown}: {e}"))?;
        if pem.label != "CERTIFICATE" {
            continue;
        }
        let cert = pem
            .parse_x509()
            .map_err(|e| format!("{shown}: certificate: {e}"))?;
        return Ok(cert.validity().not_after.timestamp());
    }
    Err(format!("{shown}: no certificate"))
}

/// The expiry of each TLS listener's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertificateExpiry {
    /// (listener, notAfter in Unix seconds): `diameter` or `api`.
    listeners: Vec<(&'static str, i64)>,
}

impl CertificateExpiry {
    /// Adds the certificate `listener` serves from `path`. A file that
    /// cannot be read now (it was loaded a moment ago) is logged and left
    /// out: the metric must never stop the server.
    pub fn add(&mut self, listener: &'static str, path: &Path) {
        match not_after(path) {
            Ok(t) => self.listeners.push((listener, t)),
            Err(e) => tracing::warn!(
                listener,
                error = %e,
                "TLS certificate expiry not known; {FAMILY} will lack it"
            ),
        }
    }
}

impl MetricsSource for CertificateExpiry {
    fn write(&self, out: &mut Exposition) {
        let mut f = out.family(
            FAMILY,
            "When the TLS certificate each listener serves expires (its notAfter), Unix seconds.",
            Kind::Gauge,
        );
        for (listener, t) in &self.listeners {
            f.sample(&[("listener", listener)], *t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render_source;
    use std::sync::Arc;

    /// A self-signed certificate valid until the given day, and its key (PEM).
    fn pem_files(year: i32, month: u8, day: u8) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["pcrf.test".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let cert = params.self_signed(&key).expect("certificate");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn the_leaf_certificates_not_after_is_reported() {
        let dir = std::env::temp_dir().join(format!("pcrf-cert-expiry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (cert, key) = pem_files(2031, 5, 17);
        let (other, _) = pem_files(2040, 1, 1);
        let expected = jiff::civil::date(2031, 5, 17)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .expect("date")
            .timestamp()
            .as_second();
        // A key before the chain is skipped; the leaf comes before its issuer.
        let bundle = dir.join("bundle.pem");
        std::fs::write(&bundle, format!("{key}{cert}{other}")).expect("write");
        assert_eq!(not_after(&bundle), Ok(expected));

        let mut e = CertificateExpiry::default();
        e.add("diameter", &bundle);
        e.add("api", &dir.join("missing.pem"));
        let key_only = dir.join("key.pem");
        std::fs::write(&key_only, &key).expect("write");
        assert!(not_after(&key_only)
            .expect_err("no certificate")
            .ends_with("no certificate"));
        e.add("api", &key_only);
        let text = render_source(Arc::new(e));
        assert_eq!(
            text,
            format!(
                "# HELP {FAMILY} When the TLS certificate each listener serves expires (its notAfter), Unix seconds.\n\
                 # TYPE {FAMILY} gauge\n\
                 {FAMILY}{{listener=\"diameter\"}} {expected}\n"
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_tls_the_family_has_no_samples() {
        let text = render_source(Arc::new(CertificateExpiry::default()));
        assert!(text.contains(&format!("# TYPE {FAMILY} gauge\n")), "{text}");
        assert!(!text.contains(&format!("{FAMILY}{{")), "{text}");
    }
}
