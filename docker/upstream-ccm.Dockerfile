# Upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/), for the kind path
# (`FAKECLOUD_KIND_CCM=upstream make kind-up`). The binary is the static (CGO off) one scripts/build-upstream-ccm.sh
# builds and caches, staged into the build context by `fakecloud-kind images`, so the image builds offline. By hand:
#   docker build -f docker/upstream-ccm.Dockerfile -t fakecloud/upstream-ccm:dev <dir with fakecloud-upstream-ccm>
FROM debian:bookworm-slim
COPY fakecloud-upstream-ccm /usr/local/bin/fakecloud-upstream-ccm
USER 65532:65532
ENTRYPOINT ["fakecloud-upstream-ccm"]
