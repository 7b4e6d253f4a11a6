#!/usr/bin/env python3
"""Self-test of the MongoDB emulator, with pymongo against a spawned emulator.

    "$(scripts/mongo-emulator.sh --setup-only)" tests/mongo-emulator/test_emulator.py

Ends with the line `N passed, N failed`; exits non-zero when a test failed.
"""

import os
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

import bson
from bson import Int64, ObjectId
from pymongo import MongoClient, ReturnDocument
from pymongo.errors import (BulkWriteError, DuplicateKeyError, OperationFailure,
                            PyMongoError)

HERE = os.path.dirname(os.path.abspath(__file__))
TXN_TIMEOUT = 1.5

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def eq(a, b, what=''):
    if a != b:
        raise AssertionError('%s: %r != %r' % (what, a, b))


def ok(cond, what):
    if not cond:
        raise AssertionError(what)


class Emulator:
    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, 'emulator.py'), '--port', '0'] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith('READY '):
            self.proc.kill()
            raise RuntimeError('emulator did not start: %r %s' % (line, self.proc.stderr.read()))
        self.port = int(line.split()[1])
        # Drain stderr so the emulator never blocks on a full pipe.
        self.log = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def uri(self, extra='directConnection=true'):
        return 'mongodb://127.0.0.1:%d/?%s' % (self.port, extra)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def raw_command(port, doc, sock=None):
    """Send one OP_MSG and return the reply document (and the socket)."""
    s = sock or socket.create_connection(('127.0.0.1', port))
    body = struct.pack('<I', 0) + b'\x00' + bson.encode(doc)
    s.sendall(struct.pack('<iiii', 16 + len(body), 1, 0, 2013) + body)
    header = _recv(s, 16)
    length = struct.unpack('<i', header[:4])[0]
    data = _recv(s, length - 16)
    return bson.decode(data[5:]), s


def _recv(s, n):
    buf = b''
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError('closed')
        buf += chunk
    return buf


EMU = None
CLIENT = None


def db():
    return CLIENT.selftest


# ------------------------------------------------------------------ tests

@test
def handshake():
    r, s = raw_command(EMU.port, {'hello': 1, 'helloOk': True, '$db': 'admin'})
    s.close()
    eq(r['ok'], 1.0, 'ok')
    eq(r['isWritablePrimary'], True, 'isWritablePrimary')
    eq(r['setName'], 'rs0', 'setName')
    eq(r['hosts'], ['127.0.0.1:%d' % EMU.port], 'hosts')
    eq(r['me'], '127.0.0.1:%d' % EMU.port, 'me')
    eq(r['secondary'], False, 'secondary')
    eq(r['maxWireVersion'], 21, 'maxWireVersion')
    eq(r['minWireVersion'], 0, 'minWireVersion')
    eq(r['logicalSessionTimeoutMinutes'], 30, 'logicalSessionTimeoutMinutes')
    ok('topologyVersion' not in r, 'no topologyVersion')
    for k in ('maxBsonObjectSize', 'maxMessageSizeBytes', 'maxWriteBatchSize', 'localTime'):
        ok(k in r, k)
    r, s = raw_command(EMU.port, {'isMaster': 1, 'helloOk': True, '$db': 'admin'})
    s.close()
    ok(r['ismaster'] and r['helloOk'], 'isMaster legacy fields')
    eq(CLIENT.admin.command('ping')['ok'], 1.0, 'ping')
    eq(CLIENT.admin.command('buildInfo')['versionArray'][0], 7, 'buildInfo')
    # The replicaSet form of the URI works too.
    c = MongoClient(EMU.uri('replicaSet=rs0'), serverSelectionTimeoutMS=5000)
    eq(c.admin.command('ping')['ok'], 1.0, 'ping via replicaSet=rs0')
    c.close()


@test
def unknown_command():
    try:
        CLIENT.admin.command('frobnicate')
        raise AssertionError('no error')
    except OperationFailure as e:
        eq(e.code, 59, 'code')
        eq(e.details['codeName'], 'CommandNotFound', 'codeName')


@test
def crud():
    c = db().crud
    c.drop()
    r = c.insert_many([{'_id': i, 'g': i % 3, 'name': 'n%d' % i, 'tags': []} for i in range(20)])
    eq(len(r.inserted_ids), 20, 'inserted')
    eq([d['_id'] for d in c.find({'g': 1}).sort('_id', -1).skip(1).limit(3)], [16, 13, 10],
       'filter/sort/skip/limit')
    eq(c.find_one({'_id': 4}, {'name': 1, '_id': 0}), {'name': 'n4'}, 'projection')
    eq(c.find_one({'_id': {'$in': [3, 5]}, 'g': 2}, {'_id': 1}), {'_id': 5}, '$in on _id')
    r = c.update_many({'g': 0}, {'$set': {'x': 1}, '$push': {'tags': 'a'}, '$inc': {'cnt': 2}})
    eq((r.matched_count, r.modified_count), (7, 7), 'update_many')
    d = c.find_one({'_id': 0})
    eq((d['x'], d['tags'], d['cnt']), (1, ['a'], 2), 'update operators')
    r = c.update_one({'_id': 0}, {'$set': {'x': 1}})
    eq((r.matched_count, r.modified_count), (1, 0), 'no-op update nModified 0')
    r = c.replace_one({'_id': 1}, {'name': 'replaced'})
    eq(c.find_one({'_id': 1}), {'_id': 1, 'name': 'replaced'}, 'replacement')
    r = c.update_one({'name': 'new'}, {'$set': {'v': 1}, '$setOnInsert': {'created': True}},
                     upsert=True)
    ok(r.upserted_id is not None and r.matched_count == 0, 'upsert reports upserted id')
    d = c.find_one({'_id': r.upserted_id})
    eq((d['name'], d['v'], d['created']), ('new', 1, True), 'upserted document')
    r = c.update_one({'name': 'new'}, {'$set': {'v': 2}, '$setOnInsert': {'created': False}},
                     upsert=True)
    eq((r.matched_count, r.modified_count, r.upserted_id), (1, 1, None), 'upsert existing')
    eq(c.find_one({'name': 'new'})['created'], True, '$setOnInsert not applied on update')
    r = c.replace_one({'_id': 'rep'}, {'a': 1}, upsert=True)
    eq(r.upserted_id, 'rep', 'replacement upsert takes _id from the filter')
    eq(c.delete_one({'g': 2}).deleted_count, 1, 'delete_one')
    eq(c.delete_many({'g': 2}).deleted_count, 5, 'delete_many')
    eq(c.count_documents({}), 16, 'count_documents')
    eq(c.estimated_document_count(), 16, 'estimated_document_count')
    eq(sorted(c.distinct('g')), [0, 1], 'distinct')
    try:
        c.update_one({'_id': 3}, {'$set': {'_id': 99}})
        raise AssertionError('_id change allowed')
    except OperationFailure as e:
        eq(e.code, 66, 'ImmutableField')


@test
def aggregate():
    c = db().agg
    c.drop()
    c.insert_many([{'k': i % 4, 'v': Int64(i)} for i in range(40)])
    out = list(c.aggregate([{'$match': {'v': {'$gte': 8}}}, {'$group': {'_id': '$k', 's': {'$sum': '$v'}, 'n': {'$sum': 1}}},
                            {'$sort': {'_id': 1}}, {'$skip': 1}, {'$limit': 2}]))
    eq([d['_id'] for d in out], [1, 2], 'group/sort/skip/limit')
    ok(isinstance(out[0]['s'], Int64), '$sum of Int64 stays Int64: %r' % type(out[0]['s']))
    eq(list(out[0].keys())[0], '_id', '_id first in $group output')
    eq(list(c.aggregate([{'$match': {'k': 3}}, {'$count': 'n'}])), [{'n': 10}], '$count')
    eq(c.count_documents({'k': 3}, skip=2, limit=5), 5, 'count_documents skip/limit')


@test
def indexes():
    c = db().idx
    c.drop()
    eq(c.create_index([('email', 1)], unique=True), 'email_1', 'create unique')
    eq(c.create_index([('email', 1)], unique=True), 'email_1', 'idempotent')
    c.create_index([('t', 1), ('k', -1)], unique=True, name='t_k')
    c.create_index([('plain', 1)])
    names = sorted(i['name'] for i in c.list_indexes())
    eq(names, ['_id_', 'email_1', 'plain_1', 't_k'], 'listIndexes')
    info = c.index_information()
    eq(info['t_k']['key'], [('t', 1), ('k', -1)], 'compound key order')
    ok(info['t_k'].get('unique'), 'unique flag listed')
    for spec, kw, code in (([('email', 1)], {'unique': False}, 85),
                           ([('other', 1)], {'name': 'email_1'}, 86)):
        try:
            c.create_index(spec, **kw)
            raise AssertionError('conflicting index accepted')
        except OperationFailure as e:
            eq(e.code, code, 'conflict code')
    c.drop_index('plain_1')
    eq(len(list(c.list_indexes())), 3, 'dropIndexes')
    # Creating a unique index over duplicates fails.
    d = db().idx2
    d.drop()
    d.insert_many([{'a': 1}, {'a': 1}])
    try:
        d.create_index('a', unique=True)
        raise AssertionError('unique index over duplicates')
    except OperationFailure as e:
        eq(e.code, 11000, 'dup on index build')


@test
def index_lookups():
    c = db().ixl
    c.drop()
    c.create_index('tags')
    c.create_index('a.b')
    c.create_index([('s', 1), ('p', 1)])
    docs = [{'_id': 1, 'tags': ['x', 'y'], 'a': [{'b': 1}, {'b': 2}], 's': 'ready', 'p': 1},
            {'_id': 2, 'tags': 'x', 'a': {'b': 2}, 's': 'ready', 'p': 2},
            {'_id': 3, 'tags': [], 'a': {'b': 3}, 's': 'done', 'p': 1},
            {'_id': 4, 's': 'ready', 'p': Int64(1)}]
    c.insert_many(docs)
    ids = lambda flt: sorted(d['_id'] for d in c.find(flt))
    eq(ids({'tags': 'x'}), [1, 2], 'multikey equality')
    eq(ids({'tags': {'$in': ['y', 'z']}}), [1], '$in on index')
    eq(ids({'a.b': 2}), [1, 2], 'dotted path through an array')
    eq(ids({'s': 'ready', 'p': 1}), [1, 4], 'compound equality, int32 == Int64')
    eq(ids({'s': 'ready', 'p': 1.0, 'tags': 'x'}), [1], 'extra conditions still applied')
    c.update_one({'_id': 2}, {'$set': {'tags': 'z', 's': 'done'}})
    eq(ids({'tags': 'x'}), [1], 'index maintained on update')
    eq(ids({'s': 'done', 'p': 2}), [2], 'compound maintained on update')
    c.delete_one({'_id': 1})
    eq(ids({'a.b': 2}), [2], 'index maintained on delete')
    with CLIENT.start_session() as s:
        s.start_transaction()
        c.update_one({'_id': 4}, {'$set': {'s': 'done'}}, session=s)
        eq(ids({'s': 'ready', 'p': 1}), [4], 'outside reader: committed state')
        s.abort_transaction()
    eq(ids({'s': 'ready', 'p': 1}), [4], 'index restored on abort')


def _dup_details(fn):
    try:
        fn()
    except (DuplicateKeyError, BulkWriteError, OperationFailure) as e:
        det = e.details
        if 'writeErrors' in det:
            det = det['writeErrors'][0]
        return det
    raise AssertionError('no duplicate key error')


@test
def duplicate_keys():
    c = db().dups
    c.drop()
    c.create_index('email', unique=True, name='email_uniq')
    c.create_index([('t', 1), ('k', 1)], unique=True, name='t_k')
    c.insert_one({'_id': 1, 'email': 'a@x', 't': 'T', 'k': 1})
    det = _dup_details(lambda: c.insert_one({'email': 'a@x', 't': 'T', 'k': 2}))
    eq(det['code'], 11000, 'code')
    eq(det['codeName'], 'DuplicateKey', 'codeName')
    eq(det['keyPattern'], {'email': 1}, 'keyPattern')
    eq(det['keyValue'], {'email': 'a@x'}, 'keyValue')
    eq(det['errmsg'], 'E11000 duplicate key error collection: selftest.dups index: email_uniq '
                      'dup key: { email: "a@x" }', 'errmsg')
    det = _dup_details(lambda: c.insert_one({'email': 'b@x', 't': 'T', 'k': 1}))
    eq((det['keyPattern'], det['keyValue']), ({'t': 1, 'k': 1}, {'t': 'T', 'k': 1}), 'compound')
    ok('index: t_k dup key: { t: "T", k: 1 }' in det['errmsg'], det['errmsg'])
    det = _dup_details(lambda: c.insert_one({'_id': 1, 'email': 'c@x'}))
    eq((det['keyPattern'], det['keyValue']), ({'_id': 1}, {'_id': 1}), '_id')
    ok('index: _id_ dup key: { _id: 1 }' in det['errmsg'], det['errmsg'])
    det = _dup_details(lambda: c.update_one({'email': 'z@x'}, {'$set': {'t': 'T', 'k': 1}},
                                            upsert=True))
    eq(det['keyPattern'], {'t': 1, 'k': 1}, 'upsert dup')
    c.insert_one({'_id': 2, 'email': 'b@x', 't': 'T', 'k': 2})
    det = _dup_details(lambda: c.update_one({'_id': 2}, {'$set': {'email': 'a@x'}}))
    eq(det['keyPattern'], {'email': 1}, 'update dup')
    eq(c.find_one({'_id': 2})['email'], 'b@x', 'failed update left the document alone')
    det = _dup_details(lambda: c.find_one_and_update({'_id': 2}, {'$set': {'email': 'a@x'}}))
    eq((det['code'], det['keyPattern']), (11000, {'email': 1}), 'findAndModify dup')
    det = _dup_details(lambda: c.find_one_and_update({'email': 'q@x'}, {'$set': {'t': 'T', 'k': 2}},
                                                     upsert=True))
    eq(det['keyPattern'], {'t': 1, 'k': 1}, 'findAndModify upsert dup')
    # ordered=False keeps going after a duplicate
    try:
        c.insert_many([{'email': 'a@x'}, {'email': 'u1', 'k': 10}, {'email': 'u2', 'k': 11}],
                      ordered=False)
    except BulkWriteError as e:
        eq(e.details['nInserted'], 2, 'unordered insert continues')
        eq(e.details['writeErrors'][0]['index'], 0, 'error index')
    # Index map stays right after a delete: the key is free again.
    c.delete_one({'email': 'a@x'})
    c.insert_one({'email': 'a@x', 't': 'T', 'k': 1})
    # sparse/partial unique indexes
    s = db().sparse
    s.drop()
    s.create_index('x', unique=True, sparse=True)
    s.insert_many([{'a': 1}, {'a': 2}, {'x': 1}])
    _dup_details(lambda: s.insert_one({'x': 1}))
    p = db().partial
    p.drop()
    p.create_index('x', unique=True, partialFilterExpression={'live': True})
    p.insert_many([{'x': 1, 'live': False}, {'x': 1, 'live': False}, {'x': 1, 'live': True}])
    _dup_details(lambda: p.insert_one({'x': 1, 'live': True}))


@test
def int64():
    c = db().ints
    c.drop()
    c.insert_one({'_id': 1, 'n': Int64(5), 'small': 1, 'big': Int64(2 ** 40)})
    c.update_one({'_id': 1}, {'$inc': {'n': 1, 'fresh': Int64(3), 'small': 1, 'big': Int64(1)}})
    c.update_one({'_id': 1}, {'$inc': {'n': Int64(2)}})
    c.update_one({'_id': 1}, {'$mul': {'n': 2}})
    d = c.find_one({'_id': 1})
    eq(d['n'], 16, 'value')
    ok(isinstance(d['n'], Int64), '$inc/$mul keep Int64: %r' % type(d['n']))
    ok(isinstance(d['fresh'], Int64), '$inc on a missing field with Int64 operand')
    ok(not isinstance(d['small'], Int64), 'int32 stays int32')
    ok(isinstance(d['big'], Int64), 'big Int64')
    r = c.find_one_and_update({'_id': 1}, {'$inc': {'n': Int64(1)}}, return_document=ReturnDocument.AFTER)
    ok(isinstance(r['n'], Int64) and r['n'] == 17, 'findAndModify $inc Int64')
    c.replace_one({'_id': 1}, {'n': Int64(1)})
    ok(isinstance(c.find_one({'_id': 1})['n'], Int64), 'replacement keeps Int64')
    c.update_one({'_id': 1}, {'$set': {'n': 1}})
    ok(not isinstance(c.find_one({'_id': 1})['n'], Int64), 'type change int64->int32 stored')
    try:
        c.update_one({'_id': 1}, {'$inc': {'n': 'x'}})
        raise AssertionError('non-numeric $inc accepted')
    except OperationFailure as e:
        eq(e.code, 14, 'TypeMismatch')


@test
def find_and_modify():
    c = db().fam
    c.drop()
    c.create_index('key', unique=True)
    upd = {'$setOnInsert': {'state': 'new', 'n': Int64(0)}, '$set': {'touched': True}}
    before = c.find_one_and_update({'key': 'k1'}, upd, upsert=True,
                                   return_document=ReturnDocument.BEFORE)
    eq(before, None, 'before-doc of an upsert is None')
    before = c.find_one_and_update({'key': 'k1'}, {'$setOnInsert': {'state': 'other'}},
                                   upsert=True, return_document=ReturnDocument.BEFORE)
    eq((before['key'], before['state'], before['touched']), ('k1', 'new', True), 'existing')
    after = c.find_one_and_update({'key': 'k2'}, upd, upsert=True,
                                  return_document=ReturnDocument.AFTER, projection={'_id': 0})
    eq(after, {'key': 'k2', 'state': 'new', 'n': 0, 'touched': True}, 'upsert new=True')
    c.insert_many([{'key': 'p%d' % i, 'prio': i, 'state': 'ready'} for i in range(5)])
    got = c.find_one_and_update({'state': 'ready'}, {'$set': {'state': 'taken'}},
                                sort=[('prio', -1)], return_document=ReturnDocument.AFTER)
    eq((got['key'], got['state']), ('p4', 'taken'), 'sort picks the highest prio')
    got = c.find_one_and_replace({'key': 'p3'}, {'key': 'p3', 'replaced': True},
                                 return_document=ReturnDocument.AFTER)
    eq(got['replaced'], True, 'replacement')
    ok('state' not in got, 'replacement dropped the old fields')
    got = c.find_one_and_delete({'state': 'ready'}, sort=[('prio', 1)])
    eq(got['key'], 'p0', 'remove')
    eq(c.count_documents({'key': 'p0'}), 0, 'removed')
    eq(c.find_one_and_update({'key': 'none'}, {'$set': {'a': 1}}), None, 'no match no upsert')


@test
def cursors():
    c = db().cur
    c.drop()
    c.insert_many([{'i': i} for i in range(305)])
    cur = c.find({}, batch_size=7).sort('i', 1)
    got = [d['i'] for d in cur]
    eq(got, list(range(305)), 'getMore over batches')
    r = db().command('find', 'cur', batchSize=3)
    cid = r['cursor']['id']
    ok(isinstance(cid, Int64) and cid != 0, 'real Int64 cursor id')
    eq(len(r['cursor']['firstBatch']), 3, 'firstBatch')
    r = db().command('getMore', cid, collection='cur', batchSize=5)
    eq(len(r['cursor']['nextBatch']), 5, 'nextBatch')
    eq(r['cursor']['id'], cid, 'same cursor id')
    r = db().command('killCursors', 'cur', cursors=[cid])
    eq(r['cursorsKilled'], [cid], 'killCursors')
    try:
        db().command('getMore', cid, collection='cur')
        raise AssertionError('killed cursor still alive')
    except OperationFailure as e:
        eq(e.code, 43, 'CursorNotFound')
    r = db().command('find', 'cur', limit=10, batchSize=4)
    cid = r['cursor']['id']
    r = db().command('getMore', cid, collection='cur')
    eq(len(r['cursor']['nextBatch']), 6, 'limit respected across getMore')
    eq(r['cursor']['id'], 0, 'exhausted cursor id 0')
    eq(len(list(c.find().limit(-5))), 5, 'negative limit = single batch')


@test
def catalog():
    d = CLIENT.catalog_test
    CLIENT.drop_database('catalog_test')
    d.create_collection('a')
    try:
        d.command('create', 'a')
        raise AssertionError('create twice')
    except OperationFailure as e:
        eq(e.code, 48, 'NamespaceExists')
    d.b.insert_one({'x': 1})
    eq(sorted(d.list_collection_names()), ['a', 'b'], 'listCollections')
    ok('catalog_test' in CLIENT.list_database_names(), 'listDatabases')
    d.b.delete_many({})
    ok('b' in d.list_collection_names(), 'collection survives deleting its documents')
    d.drop_collection('a')
    d.drop_collection('never')  # no error
    eq(d.list_collection_names(), ['b'], 'drop')
    CLIENT.drop_database('catalog_test')
    ok('catalog_test' not in CLIENT.list_database_names(), 'dropDatabase')


@test
def txn_commit_visible():
    c = db().tx
    c.drop()
    c.insert_one({'_id': 'base', 'v': 0})
    with CLIENT.start_session() as s:
        s.start_transaction()
        c.insert_one({'_id': 'a'}, session=s)
        c.update_one({'_id': 'base'}, {'$set': {'v': 1}}, session=s)
        eq(c.find_one({'_id': 'base'}, session=s)['v'], 1, 'txn reads its own writes')
        t0 = time.monotonic()
        eq(c.find_one({'_id': 'a'}), None, 'outside read does not see uncommitted insert')
        eq(c.find_one({'_id': 'base'})['v'], 0, 'outside read sees committed version')
        eq(c.count_documents({}), 1, 'outside count sees committed state')
        ok(time.monotonic() - t0 < 0.5, 'outside reads do not wait')
        s.commit_transaction()
    eq(c.find_one({'_id': 'a'}), {'_id': 'a'}, 'committed insert visible')
    eq(c.find_one({'_id': 'base'})['v'], 1, 'committed update visible')


@test
def txn_abort_undone():
    c = db().tx2
    c.drop()
    c.create_index('u', unique=True)
    c.insert_many([{'_id': i, 'u': i} for i in range(5)])
    with CLIENT.start_session() as s:
        s.start_transaction()
        c.insert_one({'_id': 10, 'u': 10}, session=s)
        c.update_many({}, {'$inc': {'u': 100}}, session=s)
        c.delete_one({'_id': 2}, session=s)
        c.replace_one({'_id': 3}, {'u': 33}, session=s)
        db().tx2_new.insert_one({'x': 1}, session=s)  # implicit collection creation
        s.abort_transaction()
    eq(sorted((d['_id'], d['u']) for d in c.find()), [(i, i) for i in range(5)], 'all undone')
    ok('tx2_new' not in db().list_collection_names(), 'collection creation undone')
    c.insert_one({'_id': 20, 'u': 10})  # the aborted insert's unique key is free again
    _dup_details(lambda: c.insert_one({'u': 4}))  # and the restored ones are enforced


@test
def txn_write_error_aborts():
    c = db().tx3
    c.drop()
    c.create_index('u', unique=True)
    c.insert_one({'u': 1})
    s = CLIENT.start_session()
    s.start_transaction()
    c.insert_one({'u': 2}, session=s)
    try:
        c.insert_one({'u': 1}, session=s)
        raise AssertionError('no dup error')
    except DuplicateKeyError as e:
        eq(e.details['keyPattern'], {'u': 1}, 'dup in txn has keyPattern')
    try:
        c.insert_one({'u': 3}, session=s)
        raise AssertionError('aborted txn accepted a write')
    except OperationFailure as e:
        eq(e.code, 251, 'NoSuchTransaction')
        ok(e.has_error_label('TransientTransactionError'), 'transient label')
    try:
        s.commit_transaction()
        raise AssertionError('commit of aborted txn')
    except OperationFailure as e:
        eq(e.code, 251, 'commit NoSuchTransaction')
        ok(e.has_error_label('TransientTransactionError'), 'commit transient label')
    s.end_session()
    eq(c.count_documents({'u': 2}), 0, 'write before the error undone')


@test
def txn_concurrent():
    c = db().tx4
    c.drop()
    c.insert_one({'_id': 'ctr', 'v': 0})
    # Two open transactions: the second is refused with a transient WriteConflict.
    s1, s2 = CLIENT.start_session(), CLIENT.start_session()
    s1.start_transaction()
    c.insert_one({'w': 1}, session=s1)
    s2.start_transaction()
    t0 = time.monotonic()
    try:
        c.insert_one({'w': 2}, session=s2)
        raise AssertionError('second transaction not refused')
    except OperationFailure as e:
        eq(e.code, 112, 'WriteConflict')
        ok(e.has_error_label('TransientTransactionError'), 'transient')
    ok(time.monotonic() - t0 < 1.0, 'refused quickly')
    s2.abort_transaction()
    s1.commit_transaction()
    # Non-transactional writes wait for the open transaction instead of failing.
    s1.start_transaction()
    c.insert_one({'w': 3}, session=s1)
    threading.Timer(0.2, s1.commit_transaction).start()
    t0 = time.monotonic()
    c.insert_one({'w': 4})
    ok(time.monotonic() - t0 >= 0.15, 'outside write waited for the commit')
    eq(c.count_documents({'w': {'$in': [1, 3, 4]}}), 3, 'both visible')
    s1.end_session()
    s2.end_session()
    # with_transaction from several threads: retries, no lost update.
    errors = []
    attempts = [0]

    def worker(n):
        try:
            with CLIENT.start_session() as s:
                for _ in range(n):
                    def body(session):
                        attempts[0] += 1
                        v = c.find_one({'_id': 'ctr'}, session=session)['v']
                        time.sleep(0.001)
                        c.update_one({'_id': 'ctr'}, {'$set': {'v': v + 1}}, session=session)
                    s.with_transaction(body)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(15,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    eq(errors, [], 'worker errors')
    eq(c.find_one({'_id': 'ctr'})['v'], 60, 'no lost updates')
    print('    (with_transaction: 60 transactions, %d attempts)' % attempts[0])


@test
def txn_timeout_and_disconnect():
    c = db().tx5
    c.drop()
    # A transaction left open is rolled back after the idle timeout.
    s = CLIENT.start_session()
    s.start_transaction()
    c.insert_one({'idle': 1}, session=s)
    t0 = time.monotonic()
    c.insert_one({'outside': 1})  # waits for the expiry
    waited = time.monotonic() - t0
    ok(TXN_TIMEOUT - 0.3 < waited < TXN_TIMEOUT + 2, 'waited %.2fs' % waited)
    eq(c.count_documents({'idle': 1}), 0, 'expired txn rolled back')
    try:
        s.commit_transaction()
        raise AssertionError('commit of expired txn')
    except OperationFailure as e:
        eq(e.code, 251, 'NoSuchTransaction')
    s.end_session()
    # A connection that drops with a transaction open aborts it at once.
    lsid = {'id': bson.Binary(os.urandom(16), 4)}
    r, sock = raw_command(EMU.port, {'insert': 'tx5', 'documents': [{'dropped': 1}],
                                     'lsid': lsid, 'txnNumber': Int64(1),
                                     'startTransaction': True, 'autocommit': False,
                                     '$db': 'selftest'})
    eq(r['ok'], 1.0, 'raw txn insert')
    sock.close()
    t0 = time.monotonic()
    c.insert_one({'after': 1})
    ok(time.monotonic() - t0 < 0.5, 'no wait after the connection dropped')
    eq(c.count_documents({'dropped': 1}), 0, 'dropped connection rolled back')
    # endSessions aborts the session's transaction.
    r, sock = raw_command(EMU.port, {'insert': 'tx5', 'documents': [{'ended': 1}],
                                     'lsid': lsid, 'txnNumber': Int64(2),
                                     'startTransaction': True, 'autocommit': False,
                                     '$db': 'selftest'})
    raw_command(EMU.port, {'endSessions': [lsid], '$db': 'admin'}, sock)
    r, _ = raw_command(EMU.port, {'commitTransaction': 1, 'lsid': lsid, 'txnNumber': Int64(2),
                                  'autocommit': False, '$db': 'admin'}, sock)
    eq(r['code'], 251, 'commit after endSessions')
    sock.close()
    eq(c.count_documents({'ended': 1}), 0, 'endSessions rolled back')


@test
def retried_commit_is_ok():
    lsid = {'id': bson.Binary(os.urandom(16), 4)}
    base = {'lsid': lsid, 'txnNumber': Int64(7), 'autocommit': False}
    r, sock = raw_command(EMU.port, dict({'insert': 'tx6', 'documents': [{'a': 1}],
                                          'startTransaction': True, '$db': 'selftest'}, **base))
    r, _ = raw_command(EMU.port, dict({'commitTransaction': 1, '$db': 'admin'}, **base), sock)
    eq(r['ok'], 1.0, 'commit')
    r, _ = raw_command(EMU.port, dict({'commitTransaction': 1, '$db': 'admin'}, **base), sock)
    eq(r['ok'], 1.0, 'retried commit')
    r, _ = raw_command(EMU.port, dict({'commitTransaction': 1, '$db': 'admin'},
                                      **dict(base, txnNumber=Int64(8))), sock)
    eq((r['ok'], r['code'], r.get('errorLabels')), (0.0, 251, ['TransientTransactionError']),
       'unknown txn')
    sock.close()


def _refused(port):
    """True when a command on a new connection fails (refused, or closed unanswered)."""
    try:
        r, s = raw_command(port, {'ping': 1, '$db': 'admin'})
    except OSError:
        return True
    s.close()
    return False


@test
def outage():
    c = db().outage
    c.drop()
    c.insert_many([{'_id': i, 'n': Int64(i)} for i in range(5)])
    r, s = raw_command(EMU.port, {'emulatorOutage': 500, '$db': 'selftest'})
    s.close()
    eq((r['ok'], r['code']), (0.0, 13), 'only on admin')
    r, s = raw_command(EMU.port, {'emulatorOutage': 'soon', '$db': 'admin'})
    s.close()
    eq((r['ok'], r['code']), (0.0, 2), 'needs milliseconds')

    # An open transaction (uncommitted insert) on one connection, a plain write waiting for it
    # on another, an idle third connection.
    lsid = {'id': bson.Binary(os.urandom(16), 4)}
    base = {'lsid': lsid, 'txnNumber': Int64(1), 'autocommit': False}
    r, txn_sock = raw_command(EMU.port, dict({'insert': 'outage', 'documents': [{'_id': 'txn'}],
                                              'startTransaction': True, '$db': 'selftest'},
                                             **base))
    eq(r['ok'], 1.0, 'txn insert')
    r, idle = raw_command(EMU.port, {'ping': 1, '$db': 'admin'})
    waiting = {}

    def blocked_write():
        try:
            waiting['reply'] = raw_command(EMU.port, {'insert': 'outage',
                                                      'documents': [{'_id': 'blocked'}],
                                                      '$db': 'selftest'})[0]
        except OSError as exc:
            waiting['error'] = exc
    t = threading.Thread(target=blocked_write)
    t.start()
    time.sleep(0.2)
    ok(t.is_alive(), 'the plain write waits for the transaction')

    outage_ms = 700
    t0 = time.monotonic()
    r, s = raw_command(EMU.port, {'emulatorOutage': outage_ms, '$db': 'admin'})
    eq(r, {'outageMs': float(outage_ms), 'ok': 1.0}, 'reply before the outage')
    s.settimeout(2)
    eq(s.recv(1), b'', 'the connection that asked is closed too')
    s.close()
    idle.settimeout(2)
    eq(idle.recv(1), b'', 'idle connection closed')
    idle.close()
    t.join(2)
    ok(not t.is_alive() and 'error' in waiting,
       'the waiting write is dropped unanswered, not run: %r' % waiting)
    ok(_refused(EMU.port), 'new connections refused during the outage')
    txn_sock.settimeout(2)
    eq(txn_sock.recv(1), b'', 'the transaction connection is closed')
    txn_sock.close()

    while _refused(EMU.port):
        ok(time.monotonic() - t0 < outage_ms / 1000.0 + 5, 'service resumes')
        time.sleep(0.02)
    back = time.monotonic() - t0
    ok(back >= outage_ms / 1000.0 - 0.05, 'down for the whole outage (%.2fs)' % back)
    ok(back < outage_ms / 1000.0 + 1, 'back soon after the outage (%.2fs)' % back)

    # Data intact; the open transaction was aborted; the waiting write never ran.
    eq(sorted(d['_id'] for d in c.find()), [0, 1, 2, 3, 4], 'committed data survives')
    eq(type(c.find_one({'_id': 4})['n']), Int64, 'types survive')
    r, s = raw_command(EMU.port, dict({'commitTransaction': 1, '$db': 'admin'}, **base))
    s.close()
    eq((r['ok'], r['code']), (0.0, 251), 'the open transaction was aborted')
    c.insert_one({'_id': 'after'})
    eq(c.count_documents({}), 6, 'writes work again')
    eq(CLIENT.admin.command('serverStatus')['emulator']['outages'], 1, 'counted')


@test
def restart_on_the_same_port():
    first = Emulator()
    port = first.port
    client = MongoClient(first.uri(), serverSelectionTimeoutMS=2000)
    client.selftest.reuse.insert_one({'a': 1})
    # The server side closes first, so its end of these connections lingers in TIME_WAIT:
    # binding the port again needs SO_REUSEADDR.
    first.proc.kill()
    first.proc.wait()
    client.close()
    t0 = time.monotonic()
    second = Emulator('--port', str(port))
    try:
        eq(second.port, port, 'same port')
        ok(time.monotonic() - t0 < 2.5, 'bound at once')
        with MongoClient(second.uri(), serverSelectionTimeoutMS=2000) as c2:
            eq(c2.admin.command('ping')['ok'], 1.0, 'serves')
    finally:
        second.stop()


@test
def throughput():
    c = db().perf
    c.drop()
    c.create_index('key', unique=True)
    n = 1500
    t0 = time.monotonic()
    for i in range(n):
        c.insert_one({'_id': i, 'key': 'k%d' % i, 'n': Int64(0)})
    t1 = time.monotonic()
    for i in range(n):
        c.update_one({'_id': i}, {'$inc': {'n': 1}})
    t2 = time.monotonic()
    for i in range(n):
        c.find_one({'key': 'k%d' % i})
    t3 = time.monotonic()
    with CLIENT.start_session() as s:
        for i in range(300):
            s.with_transaction(lambda ss, i=i: c.update_one({'_id': i}, {'$inc': {'n': 1}},
                                                             session=ss))
    t4 = time.monotonic()
    print('    (%d docs: insert %.0f/s, update by _id %.0f/s, find by unique key %.0f/s, '
          'transactions %.0f/s)' % (n, n / (t1 - t0), n / (t2 - t1), n / (t3 - t2),
                                    300 / (t4 - t3)))
    ok(t3 - t0 < 30, 'reasonably fast')


def main():
    global EMU, CLIENT
    EMU = Emulator('--txn-timeout', str(TXN_TIMEOUT))
    CLIENT = MongoClient(EMU.uri(), serverSelectionTimeoutMS=5000)
    CLIENT.drop_database('selftest')
    passed = failed = 0
    try:
        for fn in TESTS:
            t0 = time.monotonic()
            try:
                fn()
                passed += 1
                print('ok   %s (%.2fs)' % (fn.__name__, time.monotonic() - t0), flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print('FAIL %s' % fn.__name__, flush=True)
                traceback.print_exc(file=sys.stdout)
    finally:
        CLIENT.close()
        EMU.stop()
        if failed:
            sys.stdout.write('--- emulator log ---\n' + ''.join(EMU.log[-50:]))
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
