package s3server

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// FailDeleteKeys makes the next DeleteObjects requests fail for some of their keys: up to n keys for which
// match is true are taken out of the request before it reaches the server (so they are not deleted) and
// answered with a per-key InternalError, while the request's other keys are deleted as usual: the partial
// failure a real S3 reports inside a 200 answer. match nil: every key.
func (p *Proxy) FailDeleteKeys(n int, match func(key string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delFaults, p.delMatch = n, match
}

type deleteRequest struct {
	XMLName xml.Name       `xml:"Delete"`
	Xmlns   string         `xml:"xmlns,attr,omitempty"`
	Objects []deleteObject `xml:"Object"`
	Quiet   bool           `xml:"Quiet,omitempty"`
}

type deleteObject struct {
	Key  string `xml:"Key"`
	ETag string `xml:"ETag,omitempty"`
}

type deleteResult struct {
	XMLName xml.Name       `xml:"DeleteResult"`
	Xmlns   string         `xml:"xmlns,attr,omitempty"`
	Deleted []deleteObject `xml:"Deleted"`
	Errors  []deleteError  `xml:"Error"`
}

type deleteError struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

const s3ns = "http://s3.amazonaws.com/doc/2006-03-01/"

// takeDeleteFaults splits a DeleteObjects body into the objects forwarded and those failed.
func (p *Proxy) takeDeleteFaults(req *deleteRequest) (keep, failed []deleteObject) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range req.Objects {
		if p.delFaults > 0 && (p.delMatch == nil || p.delMatch(o.Key)) {
			p.delFaults--
			failed = append(failed, o)
			continue
		}
		keep = append(keep, o)
	}
	return keep, failed
}

// serveDeleteFaults handles a DeleteObjects request when per-key faults are armed; false: not handled.
func (p *Proxy) serveDeleteFaults(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	p.mu.Lock()
	armed := p.delFaults > 0
	p.mu.Unlock()
	if !armed {
		return false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return true
	}
	var req deleteRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return false
	}
	keep, failed := p.takeDeleteFaults(&req)
	res := deleteResult{Xmlns: s3ns}
	if len(keep) > 0 {
		fwd := deleteRequest{Xmlns: s3ns, Objects: keep, Quiet: req.Quiet}
		nb, _ := xml.Marshal(fwd)
		if err := resign(r, nb); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return true
		}
		if err := xml.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			http.Error(w, "proxy: cannot read the server's DeleteObjects answer: "+err.Error(), http.StatusBadGateway)
			return true
		}
		res.Xmlns = s3ns
	}
	for _, o := range failed {
		res.Errors = append(res.Errors, deleteError{Key: o.Key, Code: "InternalError", Message: "injected by the ckguard test proxy"})
	}
	out, _ := xml.Marshal(res)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append([]byte(xml.Header), out...))
	return true
}

// resign replaces r's body and signs it again with the test server's credentials (the body is part of
// the SigV4 signature): its checksum headers are replaced by a Content-MD5 of the new body.
func resign(r *http.Request, body []byte) error {
	for k := range r.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-checksum-") || lk == "x-amz-sdk-checksum-algorithm" || lk == "content-md5" ||
			lk == "authorization" || lk == "x-amz-date" || lk == "x-amz-content-sha256" || lk == "x-amz-trailer" ||
			lk == "x-amz-decoded-content-length" || lk == "content-encoding" {
			r.Header.Del(k)
		}
	}
	sum := md5.Sum(body)
	r.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	h := sha256.Sum256(body)
	ph := hex.EncodeToString(h[:])
	r.Header.Set("X-Amz-Content-Sha256", ph)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.URL.Host = r.Host
	if r.URL.Scheme == "" {
		r.URL.Scheme = "http"
	}
	return v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey},
		r, ph, "s3", Region, time.Now().UTC())
}
