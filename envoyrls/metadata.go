package envoyrls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata returns an answer's dynamic metadata, as the reference
// server writes it with RESPONSE_DYNAMIC_METADATA: the domain, each
// descriptor (its entries as "key=value", its limit override and
// hits_addend when given), the request's hits_addend when not 0, and the
// metadata blocks of the rules of the descriptors that passed, merged in
// order (the first value of a field stands; two blocks' mappings merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, vs []verdict, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	list := &structpb.ListValue{}
	for _, d := range req.GetDescriptors() {
		df := map[string]*structpb.Value{}
		entries := &structpb.ListValue{}
		for _, e := range d.GetEntries() {
			entries.Values = append(entries.Values, structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue())))
		}
		df["entries"] = structpb.NewListValue(entries)
		if o := d.GetLimit(); o != nil {
			df["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		list.Values = append(list.Values, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(list)
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range vs {
		v := &vs[i]
		if v.limited && v.m.metadata && statuses[i].GetCode() == rlsv3.RateLimitResponse_OK {
			mergeMetadata(passed, v.m.rule.metadata)
		}
	}
	if len(passed.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst: a field dst has stands, but
// two mappings merge.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		d, ok := dst.GetFields()[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value) // the rule's stays as it is
		case d.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(d.GetStructValue(), v.GetStructValue())
		}
	}
}
