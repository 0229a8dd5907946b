# The wasmop image: one static binary (operator, resolver and tools: `wasmop run`,
# `wasmop resolver`, ...) on a distroless base, run as a non-root user.
#
#   docker build -t wasmop:0.1.0 .
#
# The build stage runs scripts/build-release.sh, the same script CI runs; the default plugins
# are compiled to wasm32-wasip2 and embedded in the binary (builtin://).

FROM docker.io/library/rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/build-release.sh --out /out

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/wasmop /wasmop
# The compile cache of plugin components; the chart mounts an emptyDir here (read-only root).
ENV WASMOP_CACHE_DIR=/var/cache/wasmop/components
USER 65532:65532
EXPOSE 8080 8012 8013
ENTRYPOINT ["/wasmop"]
CMD ["run"]
