// Command plainloop is an unguarded go-fuse loopback mount, built only from go-fuse's public API with the
// same mount options as the guard. scripts/bench-mount.sh measures the guard against it, so the ratio
// isolates the cost of guarding from the cost of FUSE itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	ready := flag.String("ready", "", "create this file once mounted")
	debug := flag.Bool("debug", false, "log every FUSE request (to compare the requests both mounts get)")
	allowOther := flag.Bool("allow-other", false, "let other users use the mount, as ckguard mount --allow-other (scripts/posix-suite.sh switches users)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: plainloop [-ready FILE] [-debug] [-allow-other] STORE MOUNTPOINT")
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "plainloop:", err)
		os.Exit(1)
	}
	sec := time.Second
	neg := time.Duration(0)
	opts := &fs.Options{EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &neg,
		MountOptions: fuse.MountOptions{FsName: flag.Arg(0), Name: "plainloop", DirectMount: true,
			Options: []string{"default_permissions"}, MaxStackDepth: 2, Debug: *debug, AllowOther: *allowOther}}
	server, err := fs.Mount(flag.Arg(1), root, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plainloop:", err)
		os.Exit(1)
	}
	if *ready != "" {
		os.WriteFile(*ready, []byte("ok\n"), 0o644)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		server.Unmount()
	}()
	server.Wait()
}
