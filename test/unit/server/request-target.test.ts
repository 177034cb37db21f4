import { describe, expect, it } from 'vitest';
import { clientErrorStatus } from '../../../src/server/http-hardening.js';
import { MAX_TARGET_LENGTH, parseRequestTarget } from '../../../src/server/request-target.js';

describe('parseRequestTarget', () => {
  it.each([
    ['/healthz', '/healthz', ['healthz'], ''],
    ['/healthz?verbose', '/healthz', ['healthz'], 'verbose='],
    ['/', '/', [''], ''],
    ['/checkpoint/ns/pod/c?timeout=30', '/checkpoint/ns/pod/c', ['checkpoint', 'ns', 'pod', 'c'], 'timeout=30'],
    ['/containerLogs/ns/web-0/app/', '/containerLogs/ns/web-0/app/', ['containerLogs', 'ns', 'web-0', 'app', ''], ''],
    ['/pods/web%2D0', '/pods/web%2D0', ['pods', 'web%2D0'], ''],
    ['/containerLogs/a/b/c?sinceTime=2026-11-23T05:00:00Z&follow=true', '/containerLogs/a/b/c', ['containerLogs', 'a', 'b', 'c'], 'sinceTime=2026-11-23T05%3A00%3A00Z&follow=true'],
  ])('%j is the path %j', (raw, rawPath, segments, query) => {
    const t = parseRequestTarget(raw);
    expect(t.rawPath).toBe(rawPath);
    expect(t.segments).toEqual(segments);
    expect(t.query.toString()).toBe(query);
  });

  it.each([
    [undefined, 'the request target is empty'],
    ['', 'the request target is empty'],
    ['*', 'the request target "*" (asterisk-form) is only for OPTIONS'],
    ['http://a:99999/healthz', 'request target "http://a:99999/healthz" is not a valid absolute URL'],
    ['http://[/healthz', 'request target "http://[/healthz" is not a valid absolute URL'],
    ['http://%zz/healthz', 'request target "http://%zz/healthz" is not a valid absolute URL'],
    ['http:///', 'request target "http:///" is not a valid absolute URL'],
    ['http://127.0.0.1:10248/healthz', 'absolute-form request target "http://127.0.0.1:10248/healthz" is not served (nodelet is no proxy)'],
    ['example.com:443', 'request target "example.com:443" must be a path starting with "/"'],
    ['healthz', 'request target "healthz" must be a path starting with "/"'],
    ['/a b', 'the path "/a b" contains a character that must be percent-encoding'.replace('encoding', 'encoded')],
    ['/a\u0000b', 'the path "/a\\u0000b" contains a character that must be percent-encoded'],
    ['/é', 'contains a character that must be percent-encoded'],
    ['/healthz%zz', 'the path "/healthz%zz" is not valid percent-encoding'],
    ['/healthz%2', 'is not valid percent-encoding'],
    ['/pods/%ff', 'the path segment "%ff" does not decode to UTF-8 text'],
    ['/pods/a%2Fb', 'the path segment "a%2Fb" holds an encoded "/"'],
    ['/pods/a%2fb', 'holds an encoded "/"'],
    ['/pods/a%00b', 'the path segment "a%00b" holds an encoded NUL'],
    ['/pods/../checkpoint/a/b/c', 'has a ".." segment'],
    ['/pods/%2e%2E/x', 'has a ".." segment'],
    ['/./healthz', 'has a "." segment'],
    ['/healthz?a=%zz', 'the query "a=%zz" is not valid percent-encoding'],
    ['/healthz?a=%ff', 'the query "a=%ff" does not decode to UTF-8 text'],
    ['/healthz?a=\u0001', 'contains a control, space or non-ASCII character'],
  ])('%j -> 400 saying why', (raw, message) => {
    expect(() => parseRequestTarget(raw)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', details: { param: 'url' }, message: expect.stringContaining(message) }));
  });

  it('refuses a target longer than MAX_TARGET_LENGTH', () => {
    expect(() => parseRequestTarget(`/${'a'.repeat(MAX_TARGET_LENGTH)}`)).toThrow(`the request target is ${MAX_TARGET_LENGTH + 1} characters long: at most ${MAX_TARGET_LENGTH} are accepted`);
  });

  it('quotes at most 100 characters of what it refuses', () => {
    const raw = `http://${'x'.repeat(5000)}:99999/`;
    expect(() => parseRequestTarget(raw)).toThrow(expect.objectContaining({ message: expect.stringMatching(/^request target "http:\/\/x{93}…" is not a valid absolute URL/) }));
  });
});

describe('clientErrorStatus', () => {
  it('431 for headers too large, 408 for a slow request, 400 with the parser\'s reason otherwise', () => {
    expect(clientErrorStatus({ code: 'HPE_HEADER_OVERFLOW', message: 'Parse Error: Header overflow' }, 16384)).toEqual({ status: 431, phrase: 'Request Header Fields Too Large', body: 'the request line and headers exceed 16384 bytes\n' });
    expect(clientErrorStatus({ code: 'ERR_HTTP_REQUEST_TIMEOUT', message: 'x' }, 1)).toMatchObject({ status: 408 });
    expect(clientErrorStatus({ code: 'HPE_INVALID_URL', reason: 'Invalid char in url path', message: 'Parse Error' }, 1)).toEqual({ status: 400, phrase: 'Bad Request', body: 'malformed HTTP request: Invalid char in url path (HPE_INVALID_URL)\n' });
    expect(clientErrorStatus({ message: 'odd' }, 1)).toMatchObject({ status: 400, body: 'malformed HTTP request: malformed request\n' });
  });
});
