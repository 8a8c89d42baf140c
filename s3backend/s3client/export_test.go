package s3client

import "time"

// PinFor is pinFor, for tests.
const PinFor = pinFor

// RotateAt evicts a generation as a full cache does at now.
func (c *AttrCache) RotateAt(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
}

// UseSDKListDecoder makes c's listings use the SDK's XML decoding (CKGUARD_S3_SDK_DECODER=1).
func UseSDKListDecoder(c *Client, on bool) { c.sdkList = on }
