/**
 * The control plane's protobuf codec (issue 27) against bytes kubectl 1.32.4 really sent
 * (captured with -v=9 from `kubectl create ...`), and round trips of objects with binary data.
 */
import { describe, expect, it } from 'vitest';
import { DecodeError } from '../../control-plane/decode.js';
import { ProtobufKindError, decodeProtobuf, encodeProtobuf, isProtobufContentType } from '../../control-plane/protobuf.js';
import { negotiate } from '../../control-plane/server.js';

// The request bodies of kubectl 1.32.4 (hex), and what each means as JSON.
const KUBECTL: Array<[string, string, object]> = [
  [
    'create namespace pbt',
    '6b3873000a0f0a02763112094e616d657370616365121b0a130a0370627412001a0022002a0032003800420012001a020a001a002200',
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'pbt' }, spec: {}, status: {} },
  ],
  [
    'create configmap y --from-file=bin=<00 01 ff> --from-literal=t=v',
    '6b3873000a0f0a0276311209436f6e6669674d617012270a110a017912001a0022002a0032003800420012060a01741201761a0a0a0362696e12030001ff1a002200',
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'y' }, data: { t: 'v' }, binaryData: { bin: 'AAH/' } },
  ],
  [
    'create secret generic s1 --from-literal=u=p --from-file=bin=<00 01 ff> --type=Opaque',
    '6b3873000a0c0a027631120653656372657412300a120a02733112001a0022002a00320038004200120a0a0362696e12030001ff12060a01751201701a064f70617175651a002200',
    { apiVersion: 'v1', kind: 'Secret', metadata: { name: 's1' }, data: { bin: 'AAH/', u: 'cA==' }, type: 'Opaque' },
  ],
  [
    'create secret docker-registry reg --docker-server=r.example --docker-username=u --docker-password=p --docker-email=e@x',
    '6b3873000a0c0a0276311206536563726574129f010a130a0372656712001a0022002a0032003800420012680a112e646f636b6572636f6e6669676a736f6e12537b226175746873223a7b22722e6578616d706c65223a7b22757365726e616d65223a2275222c2270617373776f7264223a2270222c22656d61696c223a22654078222c2261757468223a2264547077227d7d7d1a1e6b756265726e657465732e696f2f646f636b6572636f6e6669676a736f6e1a002200',
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'reg' },
      data: { '.dockerconfigjson': Buffer.from('{"auths":{"r.example":{"username":"u","password":"p","email":"e@x","auth":"dTpw"}}}').toString('base64') },
      type: 'kubernetes.io/dockerconfigjson',
    },
  ],
  [
    'create serviceaccount sa1',
    '6b3873000a140a027631120e536572766963654163636f756e7412150a130a0373613112001a0022002a003200380042001a002200',
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'sa1' } },
  ],
  [
    'create token sa1 --audience=api --audience=other --duration=10m --bound-object-kind=Pod --bound-object-name=p1 --bound-object-uid=abc',
    '6b3873000a280a1861757468656e7469636174696f6e2e6b38732e696f2f7631120c546f6b656e52657175657374123d0a100a0012001a0022002a0032003800420012230a036170690a056f746865721a120a03506f64120276311a027031220361626320d8041a040a0012001a002200',
    {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      metadata: {},
      spec: { audiences: ['api', 'other'], boundObjectRef: { kind: 'Pod', apiVersion: 'v1', name: 'p1', uid: 'abc' }, expirationSeconds: 600 },
      status: {},
    },
  ],
];

describe('protobuf bodies kubectl sends', () => {
  it.each(KUBECTL)('kubectl %s: decodes to its JSON meaning and re-encodes byte for byte', (_cmd, hex, want) => {
    const bytes = Buffer.from(hex, 'hex');
    const got = decodeProtobuf(bytes);
    expect(got).toEqual(want);
    expect(encodeProtobuf(got).toString('hex')).toBe(hex);
  });
});

describe('round trips', () => {
  const meta = {
    name: 'x',
    namespace: 'ns',
    uid: '0b6c7c64-2f43-4a0e-9c1f-5d1f3a0e9b10',
    resourceVersion: '42',
    creationTimestamp: '2026-11-27T18:00:00Z',
    labels: { app: 'web', '10': 'ten', '2': 'two' },
    annotations: { note: '' },
    ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u1', controller: false, blockOwnerDeletion: true }],
    finalizers: ['example.com/keep'],
    managedFields: [{ manager: 'kubectl-create', operation: 'Update', apiVersion: 'v1', time: '2026-11-27T18:00:00Z', fieldsType: 'FieldsV1', fieldsV1: { 'f:data': { '.': {}, 'f:a': {} } } }],
  };

  it('a Secret with binary data, immutable and stringData', () => {
    const all = Buffer.alloc(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    const secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta,
      data: { all: all.toString('base64'), empty: '', nul: Buffer.from([0]).toString('base64') },
      stringData: { plain: 'text' },
      type: 'example.com/binary',
      immutable: true,
    };
    const back = decodeProtobuf(encodeProtobuf(secret));
    expect(back).toEqual(secret);
    expect(Buffer.from(back['data']['all'], 'base64')).toEqual(all);
  });

  it('a ConfigMap with binaryData, data and immutable false', () => {
    const cm = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: meta,
      data: { 'app.conf': 'a=b\n', blank: '' },
      binaryData: { 'logo.png': Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff]).toString('base64') },
      immutable: false,
    };
    expect(decodeProtobuf(encodeProtobuf(cm))).toEqual(cm);
  });

  it('a Status with causes, and lists', () => {
    const status = {
      apiVersion: 'v1',
      kind: 'Status',
      metadata: {},
      status: 'Failure',
      message: 'ConfigMap "x" is invalid: metadata.name: Required value',
      reason: 'Invalid',
      details: { name: 'x', kind: 'ConfigMap', causes: [{ reason: 'FieldValueRequired', message: 'Required value', field: 'metadata.name' }], retryAfterSeconds: 1 },
      code: 422,
    };
    expect(decodeProtobuf(encodeProtobuf(status))).toEqual(status);
    const list = { apiVersion: 'v1', kind: 'NamespaceList', metadata: { resourceVersion: '7', continue: 'abc', remainingItemCount: 0 }, items: [{ metadata: { name: 'a' }, spec: { finalizers: ['kubernetes'] }, status: { phase: 'Active', conditions: [{ type: 'T', status: 'True', lastTransitionTime: '2026-01-02T03:04:05Z' }] } }] };
    expect(decodeProtobuf(encodeProtobuf(list))).toEqual(list);
  });
});

describe('hostile or unsupported bodies', () => {
  const ns = Buffer.from(KUBECTL[0]![1], 'hex');
  it.each([
    ['no magic', Buffer.from('{"kind":"Namespace"}'), /magic/],
    ['empty', Buffer.alloc(0), /magic/],
    ['truncated envelope', ns.subarray(0, ns.length - 10), /invalid protobuf envelope/],
    ['truncated object', Buffer.concat([ns.subarray(0, 4), Buffer.from('0a0f0a02763112094e616d657370616365120a0a13', 'hex')]), /invalid protobuf/],
  ])('%s: a DecodeError', (_what, body, msg) => {
    expect(() => decodeProtobuf(body)).toThrow(DecodeError);
    expect(() => decodeProtobuf(body)).toThrow(msg);
  });

  it('deeply nested unknown groups are a DecodeError, not a crash', () => {
    // Field 1, wire type 3 (start group), a million times: protobufjs skips groups recursively.
    const body = Buffer.concat([Buffer.from('k8s\0'), Buffer.alloc(1_000_000, 0x0b)]);
    expect(() => decodeProtobuf(body)).toThrow(DecodeError);
  });

  it('a "__proto__" key in a map pollutes nothing', () => {
    // A Secret built by hand: metadata{name "x"}, data{"__proto__": 00, "ok": 01}.
    const raw = '0a030a0178' + '120e0a095f5f70726f746f5f5f120100' + '12070a026f6b120101';
    const body = Buffer.from(`6b3873000a0c0a0276311206536563726574121e${raw}`, 'hex');
    const got = decodeProtobuf(body);
    expect(got).toEqual({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'x' }, data: { ok: 'AQ==' } });
    expect(Object.getPrototypeOf(got['data'])).toBe(Object.prototype);
    expect(({} as Record<string, unknown>)['ok']).toBeUndefined();
  });

  it('an int64 beyond 2^53 is refused naming the field', () => {
    const big = encodeProtobuf({ apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: ['a'], expirationSeconds: 2 ** 62 } });
    expect(() => decodeProtobuf(big)).toThrow(/spec\.expirationSeconds: integer 4611686018427387904 is out of range/);
  });

  it('a kind with no protobuf message here names the kind', () => {
    const pod = encodeProtobuf({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'p' } });
    // Swap the kind in the envelope ("Namespace" -> "Pod"): same framing, other kind.
    const hex = pod.toString('hex').replace('0a0f0a02763112094e616d657370616365', '0a090a0276311203506f64');
    expect(() => decodeProtobuf(Buffer.from(hex, 'hex'))).toThrow(ProtobufKindError);
    expect(() => decodeProtobuf(Buffer.from(hex, 'hex'))).toThrow(/kind "Pod" in version "v1"/);
    expect(() => encodeProtobuf({ apiVersion: 'v1', kind: 'Pod' })).toThrow(ProtobufKindError);
  });

  it('content types and negotiation', () => {
    expect(isProtobufContentType('application/vnd.kubernetes.protobuf')).toBe(true);
    expect(isProtobufContentType('application/vnd.kubernetes.protobuf; charset=x')).toBe(true);
    expect(isProtobufContentType('application/json')).toBe(false);
    // kubectl's Accept: JSON is acceptable, so JSON is answered.
    expect(negotiate('application/vnd.kubernetes.protobuf,application/json', false, true)).toEqual({ yaml: false, table: false });
    expect(negotiate('application/vnd.kubernetes.protobuf', false, true)).toEqual({ yaml: false, table: false, protobuf: true });
    expect(negotiate('application/vnd.kubernetes.protobuf', false, false)).toBeUndefined();
    expect(negotiate('application/vnd.kubernetes.protobuf;q=0', false, true)).toBeUndefined();
  });
});
