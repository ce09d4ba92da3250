// Package images tests hack/build-images.sh: it builds the images once per test run and reads
// what it wrote with the standard library only, as docker load, podman load and a registry push
// read it (not with go-containerregistry, which wrote it), then runs the binaries of the images
// from their own files (chroot) as the images' user.
package images
