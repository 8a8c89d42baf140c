// Command s3raw is the raw-S3 baseline of scripts/bench-s3.sh: a plain paged ListObjectsV2 walk with
// aws-sdk-go-v2 (the floor any S3 listing through a mount is compared against), and a parallel loader.
//
//	s3raw walk --endpoint URL --bucket B [--prefix P]       prints "<objects> <seconds>"
//	s3raw put  --endpoint URL --bucket B --prefix P --n N   creates N small objects (16 in parallel)
//	s3raw proxy --endpoint URL --listen ADDR --latency D    serves a proxy in front of URL that delays
//	                                                        every request by D, until killed; it prints
//	                                                        its URL, then one line of request counts per
//	                                                        S3 operation on SIGUSR1
//
// Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: s3raw walk|put --endpoint URL --bucket B [--prefix P] [--n N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "S3 endpoint")
	bucket := fs.String("bucket", "", "bucket")
	prefix := fs.String("prefix", "", "key prefix (a folder)")
	n := fs.Int("n", 0, "put: number of objects")
	listen := fs.String("listen", "127.0.0.1:0", "proxy: listen address")
	latency := fs.Duration("latency", 0, "proxy: delay per request")
	_ = fs.Parse(os.Args[2:])
	ctx := context.Background()
	if os.Args[1] == "proxy" {
		proxy(*endpoint, *listen, *latency)
		return
	}
	p := strings.Trim(*prefix, "/")
	if p != "" {
		p += "/"
	}
	c, err := s3client.New(ctx, s3client.Config{Endpoint: *endpoint, PathStyle: true}, s3client.Location{Bucket: *bucket, Prefix: p})
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "walk":
		start := time.Now()
		count := 0
		if err := c.Walk(ctx, "", func(s3client.Object) error { count++; return nil }); err != nil {
			fail(err)
		}
		fmt.Printf("%d %.3f\n", count, time.Since(start).Seconds())
	case "put":
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		var mu sync.Mutex
		var firstErr error
		for i := range *n {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := c.Put(ctx, fmt.Sprintf("obj-%07d", i), strings.NewReader("ckguard-bench"), 13, s3client.PutOptions{}); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			fail(firstErr)
		}
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

// proxy runs the test proxy (s3server.Proxy) with a fixed latency until SIGTERM/SIGINT. SIGUSR1 prints
// the requests per S3 operation since the last SIGUSR1, e.g. "ListObjectsV2=1004 HeadObject=2000".
func proxy(endpoint, listen string, latency time.Duration) {
	p, err := s3server.StartProxy(endpoint, listen)
	if err != nil {
		fail(err)
	}
	p.SetLatency(latency)
	fmt.Println(p.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	for s := range sig {
		if s != syscall.SIGUSR1 {
			break
		}
		ops := p.Ops()
		names := make([]string, 0, len(ops))
		for op := range ops {
			names = append(names, op)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, op := range names {
			fmt.Fprintf(&b, "%s=%d ", op, ops[op])
		}
		fmt.Println(strings.TrimSpace(b.String()))
	}
	p.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3raw:", err)
	os.Exit(1)
}
