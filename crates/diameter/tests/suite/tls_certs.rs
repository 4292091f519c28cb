//! Test certificates made on the fly (rcgen): a CA and leaf certificates
//! with chosen subjectAltNames and validity, as PEM, so the TLS tests need
//! no files checked in and no certificate can expire in the repository.
//! Shared by the diameter crate's TLS tests and the PCRF's process test.

#![allow(dead_code)]

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority that signs leaves.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
}

/// A leaf certificate and its private key, PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("self-signed CA");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf valid now for these DNS names, usable as server and client.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_valid(names, false)
    }

    /// A leaf that expired in 2021.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_valid(names, true)
    }

    fn leaf_valid(&self, names: &[&str], expired: bool) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("leaf params");
        if let Some(n) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, n.as_str());
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("signed leaf");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
