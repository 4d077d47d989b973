FROM scratch
COPY ome-quota-manager /ome-quota-manager
COPY secretreader-plugin /secretreader-plugin
USER 65532:65532
ENTRYPOINT ["/ome-quota-manager"]
