//! Certificates and keys for a throwaway control plane.
//!
//! All keys are ECDSA P-256: rcgen generates them in microseconds (RSA would cost a second or
//! more per key on our machines), and the apiserver accepts ECDSA for serving, client and
//! service-account signing keys (ES256).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::{IoContext, Result};

/// The first address of `--service-cluster-ip-range`, which in-cluster clients reach the
/// apiserver on as `kubernetes.default`; the serving cert must cover it.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// Common name the apiserver's front-proxy client cert uses (and `--requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT_CN: &str = "front-proxy-client";

/// PEM cert + key written to `<dir>/<name>.crt` / `<name>.key`.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Every credential the three components and our clients need.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca: CertFiles,
    /// DER of the CA cert, for clients that trust it directly.
    pub ca_der: Vec<u8>,
    pub apiserver: CertFiles,
    pub admin: CertFiles,
    pub controller_manager: CertFiles,
    pub controller_manager_serving: CertFiles,
    pub front_proxy_ca: CertFiles,
    pub front_proxy_client: CertFiles,
    /// Service-account token signing key (private, PKCS#8) and its public half.
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

struct Ca {
    cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(common_name: &str) -> Result<(Self, KeyPair)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key)?;
        // The issuer owns a second copy of the key; the first is serialised to disk.
        let issuer_key = KeyPair::from_pem(&key.serialize_pem())?;
        Ok((Ca { cert, issuer: Issuer::new(params, issuer_key) }, key))
    }

    fn sign(&self, params: &CertificateParams) -> Result<(Certificate, KeyPair)> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert, key))
    }
}

fn leaf_params(
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
    sans: Vec<SanType>,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        params.distinguished_name.push(DnType::OrganizationName, org);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![usage];
    params.subject_alt_names = sans;
    params.use_authority_key_identifier_extension = true;
    params
}

fn dns(name: &str) -> Result<SanType> {
    Ok(SanType::DnsName(name.try_into()?))
}

impl Pki {
    /// Generates everything into `dir` (created if needed; keys are written 0600).
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).io_context(|| format!("creating {}", dir.display()))?;

        let (ca, ca_key) = Ca::new("fakecloud-ca")?;
        let (front_proxy_ca, front_proxy_ca_key) = Ca::new("fakecloud-front-proxy-ca")?;

        let loopback = SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let mut apiserver_sans = vec![loopback.clone(), SanType::IpAddress(IpAddr::V4(KUBERNETES_SERVICE_IP))];
        for name in [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ] {
            apiserver_sans.push(dns(name)?);
        }
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        let client = ExtendedKeyUsagePurpose::ClientAuth;

        let apiserver = ca.sign(&leaf_params("kube-apiserver", None, server.clone(), apiserver_sans))?;
        // O=system:masters is bound to cluster-admin by the bootstrap RBAC policy.
        let admin = ca.sign(&leaf_params("kubernetes-admin", Some("system:masters"), client.clone(), vec![]))?;
        // The bootstrap policy binds this exact user name to system:kube-controller-manager.
        let controller_manager =
            ca.sign(&leaf_params("system:kube-controller-manager", None, client.clone(), vec![]))?;
        let controller_manager_serving =
            ca.sign(&leaf_params("kube-controller-manager", None, server, vec![loopback, dns("localhost")?]))?;
        let front_proxy_client = front_proxy_ca.sign(&leaf_params(FRONT_PROXY_CLIENT_CN, None, client, vec![]))?;
        let service_account = KeyPair::generate()?;

        let write = |name: &str, cert: &Certificate, key: &KeyPair| -> Result<CertFiles> {
            let files = CertFiles {
                cert: dir.join(format!("{name}.crt")),
                key: dir.join(format!("{name}.key")),
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            };
            crate::files::write(&files.cert, files.cert_pem.as_bytes(), 0o644)?;
            crate::files::write(&files.key, files.key_pem.as_bytes(), 0o600)?;
            Ok(files)
        };
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca: write("ca", &ca.cert, &ca_key)?,
            ca_der: ca.cert.der().to_vec(),
            apiserver: write("apiserver", &apiserver.0, &apiserver.1)?,
            admin: write("admin", &admin.0, &admin.1)?,
            controller_manager: write("controller-manager", &controller_manager.0, &controller_manager.1)?,
            controller_manager_serving: write(
                "controller-manager-serving",
                &controller_manager_serving.0,
                &controller_manager_serving.1,
            )?,
            front_proxy_ca: write("front-proxy-ca", &front_proxy_ca.cert, &front_proxy_ca_key)?,
            front_proxy_client: write("front-proxy-client", &front_proxy_client.0, &front_proxy_client.1)?,
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
        };
        crate::files::write(&pki.service_account_key, service_account.serialize_pem().as_bytes(), 0o600)?;
        crate::files::write(&pki.service_account_pub, service_account.public_key_pem().as_bytes(), 0o644)?;
        Ok(pki)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_all_files_with_private_keys_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = Pki::generate(dir.path()).expect("generate");
        for files in [&pki.ca, &pki.apiserver, &pki.admin, &pki.front_proxy_client] {
            assert!(files.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
            let mode = std::fs::metadata(&files.key).expect("key exists").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", files.key.display());
        }
        let public = std::fs::read_to_string(&pki.service_account_pub).expect("sa.pub");
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"));
    }
}
