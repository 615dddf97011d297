# Upstream's e2e test server, agnhost (k8s.io/kubernetes/test/images/agnhost), as upstream's image carries it:
# the binary at /agnhost on a base with the tools upstream's specs exec in agnhost pods (curl, wget, nc, dig,
# ip, socat, iperf, bash), /uploads, porter's TLS pair, /agnhost-2 and the image-defined user. The suite's load
# balancer traffic cases run `agnhost netexec` (/hostname, /clientip); scripts/e2e-kind-lb.sh runs upstream's
# LoadBalancers specs on it. The binary is built from the Kubernetes module at the cluster's release by
# `fakecloud-kind node-binaries`, the base (fakecloud/agnhost-base, a debootstrap root filesystem with Debian's
# packages of those tools) and this image by `fakecloud-kind images`; nothing here downloads anything.
# Upstream's image (registry.k8s.io/e2e-test-images/agnhost) works the same: FAKECLOUD_E2E_AGNHOST_IMAGE.
FROM fakecloud/agnhost-base:bookworm
COPY agnhost /agnhost
EXPOSE 80 8080 8081 9376 5000
ENTRYPOINT ["/agnhost"]
CMD ["pause"]
