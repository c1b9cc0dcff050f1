// k8scheck: the judge of the test API server (tests/apiserver). Every request body the test
// server accepts is sent here first, and checked by Kubernetes' own code rather than by our
// reading of it: Debian's packaged k8s.io/api and k8s.io/apimachinery (0.36) and
// sigs.k8s.io/json, built in GOPATH mode with the standard library only besides them.
//
// What kube-apiserver does with a body, done here the same way (fieldValidation=Strict):
//   - JSON (create, update): apimachinery's strict JSON serializer into the k8s.io/api type
//     (sigs.k8s.io/json: unknown and duplicate fields, wrong types and case are errors);
//   - protobuf: apimachinery's protobuf serializer (the k8s\0 envelope) into the type's
//     generated code (generated.pb.go), so a wrong field number or wire type shows as a field
//     the server never saw; the decoded object comes back as JSON for the test server to keep;
//   - patches: a JSON merge patch (evanphx/json-patch's MergePatch, as the server applies
//     it) or a strategic merge patch (apimachinery's strategicpatch with the type's patch
//     tags: conditions merged by type, $setElementOrder, ...) applied to the object given,
//     the result held to the type strictly; the merged object comes back.
//
// Besides the server's rules: a Node's status.nodeInfo.kubeletVersion must parse with
// apimachinery's version.ParseSemantic, as kubectl, kubeadm and the controllers read it.
//
// Built offline in GOPATH mode, as Debian's dh-golang builds, from this directory:
//
//	GO111MODULE=off GOPROXY=off GOFLAGS= GOENV=off GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local \
//	GOPATH=<root>/usr/share/gocode GOROOT=<root>/usr/lib/go-1.NN go build -trimpath -o k8scheck .
//
// where <root> holds Debian's golang-k8s-api-dev, golang-k8s-apimachinery-dev,
// golang-k8s-sigs-json-dev, golang-github-evanphx-json-patch-dev (and what they depend on)
// unpacked. The tests find the binary in ATOLL_TB_K8SCHECK.
//
// Protocol: one JSON request a line on stdin, one JSON answer a line on stdout:
//
//	{"op": "body"|"patch", "kind": "Pod", "contentType": "...", "body": "<base64>", "before": {...}}
//	{"ok": true, "object": {...}} or {"ok": false, "code": 400|415|422, "error": "..."}
//
// and, for the certificates API (certificates.go): "csr" (a CSR's PEM parsed and its signature
// checked with crypto/x509, as kube-apiserver's validation and the signer do) and "sign" (an
// approved CSR signed with the test CA as kube-controller-manager's signer signs it).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/version"
	kjson "sigs.k8s.io/json"
)

type request struct {
	Op          string          `json:"op"`
	Kind        string          `json:"kind"`
	ContentType string          `json:"contentType"`
	Body        []byte          `json:"body"`
	Before      json.RawMessage `json:"before"`
}

type answer struct {
	OK     bool            `json:"ok"`
	Code   int             `json:"code,omitempty"`
	Error  string          `json:"error,omitempty"`
	Object json.RawMessage `json:"object,omitempty"`
}

// refusal is an answer kube-apiserver would give: its HTTP code and message.
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func refuse(code int, format string, args ...interface{}) *refusal {
	return &refusal{code, fmt.Sprintf(format, args...)}
}

// The kinds the test server takes, by the name its endpoints use.
var kinds = map[string]schema.GroupVersionKind{
	"Pod":                 corev1.SchemeGroupVersion.WithKind("Pod"),
	"Node":                corev1.SchemeGroupVersion.WithKind("Node"),
	"Event":               corev1.SchemeGroupVersion.WithKind("Event"),
	"DeleteOptions":       corev1.SchemeGroupVersion.WithKind("DeleteOptions"),
	"Lease":               coordinationv1.SchemeGroupVersion.WithKind("Lease"),
	"TokenReview":         authenticationv1.SchemeGroupVersion.WithKind("TokenReview"),
	"TokenRequest":        authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"),
	"ConfigMap":           corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	"Secret":              corev1.SchemeGroupVersion.WithKind("Secret"),
	"SubjectAccessReview": authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"),
	"CertificateSigningRequest": certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"),
}

var (
	scheme    = runtime.NewScheme()
	strict    *jsonserializer.Serializer
	protobufs *protobuf.Serializer
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme, certificatesv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	strict = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme, scheme,
		jsonserializer.SerializerOptions{Strict: true})
	protobufs = protobuf.NewSerializer(scheme, scheme)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req request
		var a answer
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			a = answer{Code: 500, Error: "k8scheck: a request it cannot read: " + err.Error()}
		} else {
			a = check(&req)
		}
		line, _ := json.Marshal(a)
		out.Write(append(line, '\n'))
		out.Flush()
	}
}

func check(req *request) answer {
	switch req.Op {
	case "csr":
		return result(csrInfo(req.Body))
	case "sign":
		return result(sign(req.Body))
	}
	gvk, ok := kinds[req.Kind]
	if !ok {
		return answer{Code: 500, Error: "k8scheck: no kind " + req.Kind}
	}
	var object []byte
	var err error
	switch req.Op {
	case "body":
		object, err = body(req, gvk)
	case "patch":
		object, err = patch(req, gvk)
	default:
		err = refuse(500, "k8scheck: no op %q", req.Op)
	}
	if r, ok := err.(*refusal); ok {
		return answer{Code: r.code, Error: r.msg}
	}
	if err != nil {
		return answer{Code: 500, Error: err.Error()}
	}
	return answer{OK: true, Object: object}
}

// body decodes a create or update body as the server would; JSON of what it decoded when the
// body was protobuf (the test server keeps its own parse of a JSON body).
func body(req *request, gvk schema.GroupVersionKind) ([]byte, error) {
	mediaType := strings.TrimSpace(strings.Split(req.ContentType, ";")[0])
	switch mediaType {
	case "application/json", "":
		obj, got, err := strict.Decode(req.Body, &gvk, nil)
		if err != nil {
			return nil, refuse(400, "%v", err)
		}
		if *got != gvk {
			return nil, refuse(400, "the body is a %v where a %v was expected", got, gvk)
		}
		return nil, kubeletVersion(obj)
	case runtime.ContentTypeProtobuf:
		obj, got, err := protobufs.Decode(req.Body, &gvk, nil)
		if err != nil {
			return nil, refuse(400, "protobuf: %v", err)
		}
		if *got != gvk {
			return nil, refuse(400, "the body is a %v where a %v was expected", got, gvk)
		}
		if err := kubeletVersion(obj); err != nil {
			return nil, err
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		return json.Marshal(obj)
	}
	return nil, refuse(415, "the body's media type %q is not one the server decodes", mediaType)
}

// patch applies a merge or strategic merge patch to req.Before as kube-apiserver's patch
// handler does, and holds the result to the type; the merged object.
func patch(req *request, gvk schema.GroupVersionKind) ([]byte, error) {
	typed, err := scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	var patchMap map[string]interface{}
	strictErrs, err := kjson.UnmarshalStrict(req.Body, &patchMap)
	if err != nil {
		return nil, refuse(400, "error decoding patch: %v", err)
	}
	var merged []byte
	switch strings.TrimSpace(strings.Split(req.ContentType, ";")[0]) {
	case "application/merge-patch+json":
		if merged, err = jsonpatch.MergePatch(req.Before, req.Body); err != nil {
			return nil, refuse(400, "%v", err)
		}
		if _, _, err := strict.Decode(merged, &gvk, typed); err != nil {
			return nil, refuse(422, "patch: %v", err)
		}
	case "application/strategic-merge-patch+json":
		var before map[string]interface{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Before, &before); err != nil {
			return nil, err
		}
		mergedMap, err := strategicpatch.StrategicMergeMapPatch(before, patchMap, typed)
		if err != nil {
			return nil, refuse(422, "strategic merge patch: %v", err)
		}
		err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(mergedMap, typed, true)
		if err != nil {
			return nil, refuse(422, "patch: %v", err)
		}
		if merged, err = json.Marshal(mergedMap); err != nil {
			return nil, err
		}
	default:
		return nil, refuse(415, "patch type %q is not checked here", req.ContentType)
	}
	if len(strictErrs) > 0 {
		return nil, refuse(422, "patch: %v", runtime.NewStrictDecodingError(strictErrs))
	}
	return merged, kubeletVersion(typed)
}

// kubeletVersion: a Node's kubelet version must be a semantic version by Kubernetes' rules.
func kubeletVersion(obj runtime.Object) error {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Status.NodeInfo.KubeletVersion == "" {
		return nil
	}
	v := node.Status.NodeInfo.KubeletVersion
	if _, err := version.ParseSemantic(v); err != nil {
		return refuse(422, "status.nodeInfo.kubeletVersion %q: not a Kubernetes semantic version: %v", v, err)
	}
	return nil
}
