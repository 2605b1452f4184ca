# syntax=docker/dockerfile:1
# fencelab: one binary, plus the PostgreSQL server binaries so that the
# zero-set-up default (a private throwaway cluster) works in the container.
#
#   docker build -t fencelab .
#   docker run --rm -p 8080:8080 fencelab                                  # its own Postgres
#   docker run --rm -p 8080:8080 -e DATABASE_URL=postgres://u:p@db/fencelab fencelab

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY engine ./engine
COPY server ./server
COPY web ./web
COPY templates ./templates
COPY static ./static
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/fencelab ./cmd/fencelab

FROM debian:bookworm-slim
# postgresql-15 brings initdb, postgres and pgbench (in /usr/lib/postgresql/15/bin,
# where fencelab looks); the cluster its package creates is not used.
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 ca-certificates \
 && (pg_dropcluster --stop 15 main || true) \
 && rm -rf /var/lib/apt/lists/*
# Not root: Postgres refuses to run as root. The throwaway cluster then runs
# as this same user, in a temp folder under /tmp.
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin fencelab
COPY --from=build /out/fencelab /usr/local/bin/fencelab
USER fencelab
WORKDIR /home/fencelab
ENV PORT=8080
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 CMD ["fencelab", "probe"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["fencelab"]
CMD ["serve", "--addr", ":8080"]
