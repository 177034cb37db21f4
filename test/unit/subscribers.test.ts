import { describe, expect, it } from 'vitest';
import { Subscribers } from '../../src/subscribers.js';

describe('Subscribers', () => {
  it('tells every listener in the order they subscribed, from the first emit on, and not after its removal', () => {
    const s = new Subscribers<string>();
    const heard: string[] = [];
    s.emit('before anyone listens');
    const off = s.subscribe((v) => heard.push(`a ${v}`));
    s.subscribe((v) => heard.push(`b ${v}`));
    s.emit('u1');
    off();
    off(); // twice: no harm
    s.emit('u2');
    expect(heard).toEqual(['a u1', 'b u1', 'b u2']);
  });
});
