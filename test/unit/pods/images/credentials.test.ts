/**
 * The credential keyring, docker config parsing and image names, table-driven from the
 * kubelet's facts (pkg/credentialprovider keyring.go, config.go; distribution/reference).
 */
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DockerKeyring, hashCredential, parseDockercfg, parseDockerConfigJson, type DockerConfig } from '../../../../src/pods/images/credentials.js';
import { parseImageName } from '../../../../src/pods/images/image-name.js';

const entry = (username: string) => ({ username, password: `${username}-pw`, email: '' });
/** A config whose entry for each location has the location itself as username: what matched is what comes back. */
const cfgOf = (...locations: string[]): DockerConfig => new Map(locations.map((l) => [l, entry(l)]));
const usersFor = (keyring: DockerKeyring, image: string) => keyring.lookup(parseImageName(image).repository).map((c) => c.auth.username);
const keyringOf = (...locations: string[]) => {
  const k = new DockerKeyring();
  k.add({ uid: 'u1', namespace: 'team', name: 'pull' }, cfgOf(...locations));
  return k;
};

describe('keyring lookup', () => {
  it.each<[string, string[], string, string[]]>([
    ['a host with port matches images of that registry', ['registry.example:5000'], 'registry.example:5000/team/app:v1', ['registry.example:5000']],
    ['the scheme is stripped', ['https://registry.example:5000'], 'registry.example:5000/team/app', ['https://registry.example:5000']],
    ['http:// and a trailing slash are the host too', ['http://registry.example:5000/'], 'registry.example:5000/team/app', ['http://registry.example:5000/']],
    ['/v2/ stands for the host', ['https://registry.example:5000/v2/'], 'registry.example:5000/team/app', ['https://registry.example:5000/v2/']],
    ['a host without the port does not match a registry with one', ['registry.example'], 'registry.example:5000/team/app', []],
    ['a host with a port does not match the registry without one', ['registry.example:5000'], 'registry.example/team/app', []],
    ['another port does not match', ['registry.example:5001'], 'registry.example:5000/team/app', []],
    ['a path prefix matches', ['registry.example:5000/team'], 'registry.example:5000/team/app', ['registry.example:5000/team']],
    ['another path does not', ['registry.example:5000/other'], 'registry.example:5000/team/app', []],
    ['the path is a string prefix, as upstream (team matches teamx)', ['registry.example:5000/team'], 'registry.example:5000/teamx/app', ['registry.example:5000/team']],
    ['a wildcard label matches one label', ['*.example.com'], 'eu.example.com/team/app', ['*.example.com']],
    ['a wildcard does not match the bare domain', ['*.example.com'], 'example.com/team/app', []],
    ['a wildcard does not match two labels', ['*.example.com'], 'a.eu.example.com/team/app', []],
    ['two wildcard labels match two labels', ['*.*.example.com'], 'a.eu.example.com/team/app', ['*.*.example.com']],
    ['a wildcard inside a label', ['reg-*.example.com'], 'reg-eu.example.com/app', ['reg-*.example.com']],
    ['a character class matches as a Go glob', ['reg[0-9].example.com'], 'reg7.example.com/app', ['reg[0-9].example.com']],
    ['a class with a range and a letter', ['reg[a-cx].example.com'], 'regx.example.com/app', ['reg[a-cx].example.com']],
    ['a class that does not match', ['reg[0-9].example.com'], 'rega.example.com/app', []],
    ['? begins a URL query, as in Go: the location is the host "r"', ['r?g.example.com'], 'reg.example.com/app', []],
    ['^ is refused in a host by Go\'s URL parser: the location is skipped', ['reg[^0-9].example.com'], 'rega.example.com/app', []],
    ['a malformed glob matches nothing', ['reg[.example.com'], 'rega.example.com/app', []],
    ['a wildcard with a port', ['*.example.com:5000'], 'eu.example.com:5000/app', ['*.example.com:5000']],
    ['most specific location first (reverse lexical order)', ['registry.example:5000', 'registry.example:5000/team/app', 'registry.example:5000/team'], 'registry.example:5000/team/app', ['registry.example:5000/team/app', 'registry.example:5000/team', 'registry.example:5000']],
    ['an unqualified image gets the Docker Hub credentials', ['https://index.docker.io/v1/'], 'busybox', ['https://index.docker.io/v1/']],
    ['docker.io/ images too', ['https://index.docker.io/v1/'], 'docker.io/bitnami/redis:7', ['https://index.docker.io/v1/']],
    ['a user/repo name is on Docker Hub', ['index.docker.io'], 'bitnami/redis', ['index.docker.io']],
    ['a docker.io location matches directly', ['docker.io'], 'busybox:1.36', ['docker.io']],
    ['Docker Hub credentials are not for other registries', ['https://index.docker.io/v1/'], 'quay.io/team/app', []],
    ['the Docker Hub fallback only when nothing matched', ['https://index.docker.io/v1/', 'docker.io/library'], 'busybox', ['docker.io/library']],
    ['a location Go refuses (port not a number) is skipped', ['registry.example:abc', 'registry.example:5000'], 'registry.example:5000/app', ['registry.example:5000']],
    ['localhost is a registry', ['localhost:5000'], 'localhost:5000/app', ['localhost:5000']],
  ])('%s', (_name, locations, image, want) => {
    expect(usersFor(keyringOf(...locations), image)).toEqual(want);
  });

  it('credentials of several Secrets for one location come in the Secrets order, each with its source and hash', () => {
    const k = new DockerKeyring();
    k.add({ uid: 'u1', namespace: 'team', name: 'first' }, new Map([['registry.example:5000', entry('one')]]));
    k.add({ uid: 'u2', namespace: 'team', name: 'second' }, new Map([['https://registry.example:5000', entry('two')]]));
    expect(k.lookup('registry.example:5000/team/app')).toEqual([
      { auth: { username: 'one', password: 'one-pw' }, source: { uid: 'u1', namespace: 'team', name: 'first' }, hash: hashCredential(entry('one')) },
      { auth: { username: 'two', password: 'two-pw' }, source: { uid: 'u2', namespace: 'team', name: 'second' }, hash: hashCredential(entry('two')) },
    ]);
  });

  it('a hostile glob (many stars against a long label) is decided at once, without backtracking blow-up', () => {
    const location = `${'*a'.repeat(60)}b.example.com`;
    const image = `${'a'.repeat(200)}.example.com/app`;
    const t0 = process.hrtime.bigint();
    expect(usersFor(keyringOf(location), image)).toEqual([]);
    expect(Number(process.hrtime.bigint() - t0) / 1e6).toBeLessThan(200);
  });

  it('reports the locations it skips', () => {
    const skipped: string[] = [];
    new DockerKeyring().add(undefined, cfgOf('bad host', 'ok.example'), (l) => skipped.push(l));
    expect(skipped).toEqual(['bad host']);
  });
});

describe('hashCredential', () => {
  const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
  it.each([
    ['username and password, Go field order', { username: 'u', password: 'p', email: '' }, '{"username":"u","password":"p"}'],
    ['email after password; empty fields omitted', { username: '', password: 'p', email: 'e@x' }, '{"password":"p","email":"e@x"}'],
    ['Go escapes <, > and & in strings', { username: 'a<b>', password: 'c&d', email: '' }, '{"username":"a\\u003cb\\u003e","password":"c\\u0026d"}'],
  ])('%s', (_n, e, json) => expect(hashCredential(e)).toBe(sha(json)));
});

describe('docker config documents', () => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  it.each<[string, string, [string, { username: string; password: string; email: string }][]]>([
    ['username and password', '{"auths":{"registry.example:5000":{"username":"u","password":"p"}}}', [['registry.example:5000', { username: 'u', password: 'p', email: '' }]]],
    ['auth (base64 user:password) wins over username/password', `{"auths":{"r.example":{"username":"x","password":"y","auth":"${b64('u:p:with:colons')}"}}}`, [['r.example', { username: 'u', password: 'p:with:colons', email: '' }]]],
    ['field names match case-insensitively, as Go', '{"Auths":{"r.example":{"Username":"u","PASSWORD":"p","Email":"e"}}}', [['r.example', { username: 'u', password: 'p', email: 'e' }]]],
    ['a null entry is empty credentials', '{"auths":{"r.example":null}}', [['r.example', { username: '', password: '', email: '' }]]],
    ['no auths: nothing', '{"credsStore":"desktop"}', []],
    ['unknown fields are ignored', '{"auths":{"r.example":{"auth":"' + b64('u:p') + '","identitytoken":"t"}},"HttpHeaders":{"X":"y"}}', [['r.example', { username: 'u', password: 'p', email: '' }]]],
  ])('.dockerconfigjson: %s', (_n, doc, want) => expect([...parseDockerConfigJson(doc)]).toEqual(want));

  it('.dockercfg is the map of entries itself', () => {
    expect([...parseDockercfg(`{"https://registry.example:5000":{"auth":"${b64('u:p')}","email":"e"}}`)]).toEqual([['https://registry.example:5000', { username: 'u', password: 'p', email: 'e' }]]);
  });

  it.each([
    ['not JSON', '{"auths":', /not valid JSON/],
    ['not an object', '["a"]', /the document must be an object, not array/],
    ['auths not an object', '{"auths":"x"}', /auths must be an object, not string/],
    ['an entry not an object', '{"auths":{"r.example":"u:p"}}', /entry "r.example" must be an object, not string/],
    ['a field of the wrong type', '{"auths":{"r.example":{"username":5}}}', /entry "r.example": username must be a string, not number/],
    ['auth not base64', '{"auths":{"r.example":{"auth":"%%%"}}}', /entry "r.example": auth is not valid base64/],
    ['auth without a colon', `{"auths":{"r.example":{"auth":"${b64('nocolon')}"}}}`, /entry "r.example": unable to parse auth field/],
    ['HttpHeaders of the wrong type', '{"auths":{},"HttpHeaders":{"X":1}}', /HttpHeaders must be an object of strings/],
  ])('.dockerconfigjson refused: %s', (_n, doc, re) => expect(() => parseDockerConfigJson(doc)).toThrow(re));
});

describe('image names', () => {
  const hex = 'a'.repeat(64);
  it.each<[string, string, string, string]>([
    ['busybox', 'docker.io/library/busybox', '', ''],
    ['busybox:1.36', 'docker.io/library/busybox', '1.36', ''],
    ['library/busybox', 'docker.io/library/busybox', '', ''],
    ['bitnami/redis:7', 'docker.io/bitnami/redis', '7', ''],
    ['index.docker.io/bitnami/redis', 'docker.io/bitnami/redis', '', ''],
    ['docker.io/busybox', 'docker.io/library/busybox', '', ''],
    ['registry.example:5000/team/app:v1', 'registry.example:5000/team/app', 'v1', ''],
    ['localhost/app', 'localhost/app', '', ''],
    ['Registry.Example/app', 'Registry.Example/app', '', ''],
    [`quay.io/team/app:v1@sha256:${hex}`, 'quay.io/team/app', 'v1', `sha256:${hex}`],
  ])('%s', (image, repository, tag, digest) => expect(parseImageName(image)).toEqual({ repository, tag, digest }));

  it.each([
    ['', /invalid reference format/],
    ['Busybox', /repository name \(library\/Busybox\) must be lowercase/],
    ['a b', /invalid reference format/],
    [hex, /cannot specify 64-byte hexadecimal strings/],
    ['registry.example:5000/team/app:', /invalid reference format/],
  ])('refuses %j, naming it', (image, re) => {
    expect(() => parseImageName(image)).toThrow(re);
    expect(() => parseImageName(image)).toThrow(expect.objectContaining({ details: expect.objectContaining({ reason: 'InvalidImageName' }) }));
  });
});
