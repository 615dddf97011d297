# The CCM image for the kind path (`make kind-up`). The binary is built on the host (`cargo build --release`)
# and staged into the build context by `fakecloud-kind images`, so the image builds the same with or without an
# image registry or the Rust package registry in reach of the build. By hand, from a directory holding the
# binary:
#   docker build -f docker/ccm.Dockerfile -t fakecloud/ccm:dev <dir with fakecloud-ccm>
FROM debian:bookworm-slim
COPY fakecloud-ccm /usr/local/bin/fakecloud-ccm
USER 65532:65532
ENTRYPOINT ["fakecloud-ccm"]
