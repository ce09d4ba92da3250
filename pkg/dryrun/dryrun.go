package dryrun

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Name is the query parameter Kubernetes reads.
const Name = "dryRun"

// Parameter is the name dryRun travels under between Escape and Restore. It is the server's
// own: a caller that sends it is refused (Escape), so only the caller's dryRun becomes it.
const Parameter = "mount-proxy.kcp.io.dryRun"

// Escape renames every dryRun parameter of rawQuery to Parameter and keeps everything else
// as the caller wrote it, in order. A key counts as dryRun as url.ParseQuery decodes it
// (dry%52un is dryRun too), which is how the connect handler finds it. A query that sets
// Parameter itself is an error.
func Escape(rawQuery string) (string, error) {
	if rawQuery == "" {
		return "", nil
	}
	pairs := strings.Split(rawQuery, "&")
	changed := false
	for i, pair := range pairs {
		rawKey, value, hasValue := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			continue // url.ParseQuery drops it: it is no dryRun to the connect handler either
		}
		switch key {
		case Parameter:
			return "", fmt.Errorf("query parameter %q is reserved to this server; use %s", Parameter, Name)
		case Name:
			pairs[i] = Parameter
			if hasValue {
				pairs[i] += "=" + value
			}
			changed = true
		}
	}
	if !changed {
		return rawQuery, nil
	}
	return strings.Join(pairs, "&"), nil
}

// Restore names the parameters Escape renamed dryRun again; the rest of rawQuery stays as it is.
func Restore(rawQuery string) string {
	if !strings.Contains(rawQuery, Parameter) {
		return rawQuery
	}
	pairs := strings.Split(rawQuery, "&")
	for i, pair := range pairs {
		if rawKey, value, hasValue := strings.Cut(pair, "="); rawKey == Parameter {
			pairs[i] = Name
			if hasValue {
				pairs[i] += "=" + value
			}
		}
	}
	return strings.Join(pairs, "&")
}

// Restored returns req with its dryRun restored (Restore): req itself when there is none.
func Restored(req *http.Request) *http.Request {
	restored := Restore(req.URL.RawQuery)
	if restored == req.URL.RawQuery {
		return req
	}
	r := *req
	u := *req.URL
	u.RawQuery = restored
	r.URL = &u
	r.RequestURI = u.RequestURI()
	return &r
}
