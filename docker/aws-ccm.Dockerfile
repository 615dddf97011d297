# cloud-provider-aws's aws-cloud-controller-manager, unmodified, for the kind path (`FAKECLOUD_KIND_CCM=aws make
# kind-up`, issue #50). The binary is the static (CGO off) one `scripts/build-go-tool.sh ccm-aws` builds and
# caches, staged into the build context by `fakecloud-kind images`, so the image builds offline. By hand:
#   docker build -f docker/aws-ccm.Dockerfile -t fakecloud/aws-ccm:dev <dir with aws-cloud-controller-manager>
FROM debian:bookworm-slim
COPY aws-cloud-controller-manager /usr/local/bin/aws-cloud-controller-manager
USER 65532:65532
ENTRYPOINT ["aws-cloud-controller-manager"]
