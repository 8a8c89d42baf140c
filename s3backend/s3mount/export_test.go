package s3mount

import "github.com/ckguard/ckguard/s3backend/deleteq"

// TuneQueue lets tests adjust the delete queue's options (wrap its rechecker or deleter).
func TuneQueue(o *Options, f func(*deleteq.Options)) { o.tuneQueue = f }
