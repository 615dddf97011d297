# Upstream's e2e test server, agnhost (k8s.io/kubernetes/test/images/agnhost), for the suite's load balancer
# traffic cases: `agnhost netexec` answers /hostname (which pod answered) and /clientip. The binary is built from
# the Kubernetes module at the cluster's release by scripts/kind/build-node-binaries.sh and staged by
# scripts/kind/images.sh; nothing here downloads anything. Upstream's image (registry.k8s.io/e2e-test-images/
# agnhost) works the same: FAKECLOUD_E2E_AGNHOST_IMAGE.
FROM debian:bookworm-slim
COPY agnhost /agnhost
EXPOSE 8080
ENTRYPOINT ["/agnhost"]
CMD ["pause"]
