//go:build !apf_static

package apf

// Linking: libapf found through pkg-config (apf.pc, installed by
// scripts/install.sh), as a shared library. Build with -tags apf_static to
// link libapf.a instead and get one movable binary (link_static.go).

// #cgo pkg-config: apf
import "C"
