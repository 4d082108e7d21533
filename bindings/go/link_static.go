//go:build apf_static

package apf

// Linking with -tags apf_static: libapf.a through pkg-config (apf-static.pc,
// installed by scripts/install.sh), so the binary needs no libapf.so at run
// time and can be moved anywhere.

// #cgo pkg-config: apf-static
import "C"
