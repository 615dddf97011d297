# The VPC router image for the kind path: the prebuilt `fakecloud-vpc-router` binary on a slim Debian
# base, and in /opt/cni/bin the CNI plugins its config uses (bridge, host-local, loopback, portmap), which
# the DaemonSet's init container copies onto nodes that lack them: kind's own node image has no bridge.
# Images are built offline, so nothing is compiled or installed here. The build context is a directory
# that holds the binary, built on the host (`cargo build --locked --release --bin fakecloud-vpc-router`),
# and cni-plugins/ (`fakecloud-kind node-binaries`), staged by `fakecloud-kind images`:
#   docker build -f docker/vpc-router.Dockerfile -t fakecloud/vpc-router:dev <dir>
# It needs no CA certificates (the emulator is plain HTTP on the kind network) and no iproute2 (routes go
# through netlink). It runs as root with only CAP_NET_ADMIN (see vpc-router/deploy/vpc-router.yaml).
FROM debian:bookworm-slim
COPY fakecloud-vpc-router /usr/local/bin/
COPY cni-plugins/ /opt/cni/bin/
ENTRYPOINT ["/usr/local/bin/fakecloud-vpc-router"]
