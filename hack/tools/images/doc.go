// Command images assembles the OCI images of mount-apiserver and mount-agent from static
// binaries that hack/build-images.sh built, with no registry and no container daemon: a
// scratch image with the binary, a passwd entry for the non-root user 65532 and the build
// machine's CA certificates, written as an OCI image layout and as a tarball that docker load,
// podman load, kind load image-archive and ctr images import accept.
//
// It lives in a module of its own so that go-containerregistry and its dependencies stay out
// of the server's module.
package main
