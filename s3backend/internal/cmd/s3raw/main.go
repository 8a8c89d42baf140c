// Command s3raw is the raw-S3 baseline of scripts/bench-s3.sh: a plain paged ListObjectsV2 walk with
// aws-sdk-go-v2 (the floor any S3 listing through a mount is compared against), and a parallel loader.
//
//	s3raw walk --endpoint URL --bucket B [--prefix P]       prints "<objects> <seconds>"
//	s3raw put  --endpoint URL --bucket B --prefix P --n N   creates N small objects (16 in parallel)
//
// Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
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
	_ = fs.Parse(os.Args[2:])
	ctx := context.Background()
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

func fail(err error) {
	fmt.Fprintln(os.Stderr, "s3raw:", err)
	os.Exit(1)
}
