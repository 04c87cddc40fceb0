"""paddle.dataset.movielens on a small synthetic ``ml-1m.zip``; no network.

The module's URL points at a closed local port; the expected dictionaries, users, movies and
samples are computed here from the synthetic lines themselves, and the split with Paddle's own
recipe (``numpy.random.seed`` then one ``numpy.random.random()`` per ratings line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from dask_fluid.compat.dataset import common, movielens
from tests.compat.synthetic_data import go_offline, write_movielens

AGES = [1, 18, 25, 35, 45, 50, 56]


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    go_offline(monkeypatch, movielens, ("URL",))


@pytest.fixture
def data_home(data_home, monkeypatch):
    # movielens keeps what it read in module globals, as Paddle does
    for name in ("MOVIE_INFO", "MOVIE_TITLE_DICT", "CATEGORIES_DICT", "USER_INFO"):
        monkeypatch.setattr(movielens, name, None)
    return data_home


# -- the test's own reading of the synthetic content -------------------------------------------


def parse_movies(content):
    """{id: (title without the year, genres)} and the two dictionaries by first appearance."""
    movies, words, genres = {}, {}, {}
    for line in content["movies"]:
        movie_id, title_year, genre_text = line.split("::")
        title = title_year[: title_year.rindex("(")]  # the space before the year stays
        movies[int(movie_id)] = (title, genre_text.split("|"))
        for w in title.lower().split():
            words.setdefault(w, len(words))
        for g in genre_text.split("|"):
            genres.setdefault(g, len(genres))
    return movies, words, genres


def parse_users(content):
    users = {}
    for line in content["users"]:
        uid, gender, age, job, _ = line.split("::")
        users[int(uid)] = [int(uid), 0 if gender == "M" else 1, AGES.index(int(age)), int(job)]
    return users


def paddle_draws(n, seed):
    """Paddle's split numbers: the global generator seeded, one random() per line."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        return [np.random.random() for _ in range(n)]
    finally:
        np.random.set_state(state)


def expected_samples(content, is_test, seed=0, test_ratio=0.1, ratings=None):
    movies, words, genres = parse_movies(content)
    users = parse_users(content)
    ratings = content["ratings"] if ratings is None else ratings
    out = []
    for line, u in zip(ratings, paddle_draws(len(ratings), seed), strict=True):
        if (u < test_ratio) != is_test or not line.strip():
            continue
        uid, movie_id, rating, _ = line.split("::")
        title, movie_genres = movies[int(movie_id)]
        out.append([*users[int(uid)], int(movie_id), [genres[g] for g in movie_genres],
                    [words[w] for w in title.lower().split()], [int(rating) * 2 - 5.0]])
    return out


def rewrite_ratings(path, lines):
    """Replace ratings.dat in the archive at ``path`` (and re-register it)."""
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members["ml-1m/ratings.dat"] = "".join(line + "\n" for line in lines).encode("latin-1")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    common.register_substitute(path)


# -- tests --------------------------------------------------------------------------------------


def test_train_and_test_samples(data_home):
    content = write_movielens(data_home)
    train = list(movielens.train()())
    test = list(movielens.test()())
    assert train == expected_samples(content, is_test=False)
    assert test == expected_samples(content, is_test=True)
    assert len(train) + len(test) == 300 and 10 <= len(test) <= 60
    uid, gender, age, job, movie_id, categories, title, score = train[0]
    assert all(type(v) is int for v in (uid, gender, age, job, movie_id))
    assert all(type(v) is int for v in categories + title)
    assert type(score[0]) is float and len(score) == 1
    assert {s[-1][0] for s in train + test} <= {-3.0, -1.0, 1.0, 3.0, 5.0}
    # readers are re-iterable and give the same split each time
    assert list(movielens.train()()) == train


def test_seed_and_ratio(data_home):
    content = write_movielens(data_home)
    for seed, ratio in ((7, 0.5), (2**32 - 1, 0.25), ([1, 2], 0.3)):
        train = list(movielens.train(rand_seed=seed, test_ratio=ratio)())
        test = list(movielens.test(test_ratio=ratio, rand_seed=seed)())
        assert train == expected_samples(content, False, seed, ratio)
        assert test == expected_samples(content, True, seed, ratio)
    assert list(movielens.test(rand_seed=1)()) != list(movielens.test(rand_seed=2)())
    assert list(movielens.test(test_ratio=0)()) == []
    assert len(list(movielens.train(test_ratio=0)())) == 300
    assert list(movielens.train(test_ratio=1.0)()) == []


def test_split_leaves_numpys_global_generator_alone(data_home):
    content = write_movielens(data_home)
    np.random.seed(123)
    want = np.random.random(3)
    np.random.seed(123)
    # train and test read at the same time: Paddle's reseeding of the global generator mixed
    # their splits up; each has its own generator here
    train, test = movielens.train()(), movielens.test()()
    pairs = list(zip(train, test, strict=False))
    np.testing.assert_array_equal(np.random.random(3), want)
    assert [p[0] for p in pairs] == expected_samples(content, False)[: len(pairs)]
    assert [p[1] for p in pairs] == expected_samples(content, True)


def test_meta_info(data_home):
    content = write_movielens(data_home)
    movies, words, genres = parse_movies(content)
    users = parse_users(content)
    info = movielens.movie_info()
    assert info is movielens.MOVIE_INFO and set(info) == set(movies)
    for movie_id, (title, movie_genres) in movies.items():
        assert (info[movie_id].index, info[movie_id].title) == (movie_id, title)
        assert info[movie_id].categories == movie_genres
    # the ids follow first appearance in movies.dat (Paddle: a set's order, random per process)
    assert movielens.get_movie_title_dict() == words
    assert list(words)[:4] == ["toy", "story", "city", "of"]
    assert movielens.movie_categories() == genres
    assert list(genres) != sorted(genres)
    assert movielens.get_movie_title_dict() is movielens.MOVIE_TITLE_DICT
    assert movielens.movie_categories() is movielens.CATEGORIES_DICT
    assert {uid: u.value() for uid, u in movielens.user_info().items()} == users
    assert movielens.max_movie_id() == max(movies) == 55
    assert movielens.max_user_id() == max(users) == 10
    assert movielens.max_job_id() == max(u[3] for u in users.values())
    assert len(movielens.age_table) == 7


def test_titles_latin1_and_str(data_home):
    write_movielens(data_home)
    info = movielens.movie_info()
    city = info[2]
    assert city.title == "City of Lost Children, The (Cité des enfants perdus, La) "
    assert city.value() == [2, [movielens.CATEGORIES_DICT[c] for c in city.categories],
                            [movielens.MOVIE_TITLE_DICT[w] for w in (
                                "city", "of", "lost", "children,", "the", "(cité", "des",
                                "enfants", "perdus,", "la)")]]
    assert "été" in movielens.MOVIE_TITLE_DICT  # latin-1 bytes 0xe9, not UTF-8
    assert str(info[1]) == "<MovieInfo id(1), title(Toy Story ), categories(['Romance'])>"
    assert repr(info[1]) == str(info[1])
    user = movielens.user_info()[3]
    assert str(user) == "<UserInfo id(3), gender(M), age(25), job(7)>" == repr(user)
    assert (user.index, user.is_male, user.age, user.job_id) == (3, True, 2, 7)


def test_loaded_once_per_process(data_home):
    write_movielens(data_home, seed=0)
    first = dict(movielens.get_movie_title_dict())
    write_movielens(data_home, seed=1)
    # Paddle keeps the first read in MOVIE_INFO and the other globals
    assert movielens.get_movie_title_dict() == first
    movielens.MOVIE_INFO = None
    assert movielens.get_movie_title_dict() != first


def test_dictionaries_do_not_depend_on_the_hash_seed(data_home):
    write_movielens(data_home)
    code = ("import json; from dask_fluid.compat.dataset import movielens as m; "
            "print(json.dumps([m.get_movie_title_dict(), m.movie_categories()]))")
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "DASK_FLUID_DATA_HOME": data_home, "PYTHONHASHSEED": hash_seed}
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0]) == [movielens.get_movie_title_dict(),
                                   movielens.movie_categories()]


def test_blank_and_malformed_lines(data_home):
    content = write_movielens(data_home)
    ratings = list(content["ratings"])
    ratings.insert(5, "")
    ratings.insert(40, "   ")
    rewrite_ratings(content["path"], ratings)
    # a blank line still takes its draw, so the other lines split as Paddle splits them
    for is_test, creator in ((False, movielens.train), (True, movielens.test)):
        assert list(creator(rand_seed=3, test_ratio=0.4)()) == expected_samples(
            content, is_test, 3, 0.4, ratings)
    rewrite_ratings(content["path"], [*content["ratings"][:7], "1::1::5"])
    with pytest.raises(ValueError, match=r"ml-1m/ratings.dat line 8: expected 4 fields .* got 3"):
        list(movielens.test(test_ratio=1)())


def test_offline_download_error(data_home):
    reader = movielens.train()  # lazy, as Paddle: nothing is read until iterated
    calls = [lambda: next(iter(reader())), lambda: list(movielens.test()()), movielens.fetch,
             movielens.movie_info, movielens.user_info, movielens.get_movie_title_dict,
             movielens.movie_categories, movielens.max_movie_id, movielens.max_user_id,
             movielens.max_job_id]
    for call in calls:
        with pytest.raises(common.DownloadError) as info:
            call()
        assert info.value.path == os.path.join(data_home, "movielens", "movielens%2Fml-1m.zip")
        assert info.value.md5sum == movielens.MD5 == "c4d9eecfca2ab87c1945afe126590906"
    write_movielens(data_home)
    movielens.fetch()
    assert next(iter(reader()))


def test_bad_arguments(data_home):
    with pytest.raises(TypeError):
        movielens.train(0)  # keyword-only, as Paddle's functools.partial(**kwargs)
    with pytest.raises(TypeError, match="test_ratio must be a real number, got '0.1'"):
        movielens.test(test_ratio="0.1")
    with pytest.raises(TypeError, match="test_ratio must be a real number, got True"):
        movielens.train(test_ratio=True)
    with pytest.raises(TypeError, match="rand_seed must be a seed .* got 'x'"):
        movielens.train(rand_seed="x")
    with pytest.raises(ValueError, match="rand_seed must be a seed .* got -1"):
        movielens.test(rand_seed=-1)
    with pytest.raises(ValueError, match=r"age 20 is not a MovieLens age group \[1, 18"):
        movielens.UserInfo(1, "F", "20", 3)
    with pytest.raises(RuntimeError, match="CATEGORIES_DICT is not loaded yet"):
        movielens.MovieInfo(1, ["Drama"], "Heat ").value()
    assert movielens.UserInfo("4", "F", "56", "0").value() == [4, 1, 6, 0]


def test_title_without_a_year(data_home):
    content = write_movielens(data_home)
    with zipfile.ZipFile(content["path"]) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members["ml-1m/movies.dat"] += b"99::No Year::Drama\n"
    with zipfile.ZipFile(content["path"], "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    common.register_substitute(content["path"])
    with pytest.raises(ValueError, match=r"movies.dat line 15: the title 'No Year' does not end"):
        movielens.movie_info()
    assert movielens.MOVIE_INFO is None  # nothing half loaded


def test_synthetic_archive_is_deterministic(tmp_path):
    a = write_movielens(tmp_path / "a")["path"]
    b = write_movielens(tmp_path / "b")["path"]
    assert common.md5file(a) == common.md5file(b)
    assert os.path.getsize(a) < 10_000
    with zipfile.ZipFile(a) as zf:
        assert zf.namelist() == ["ml-1m/", "ml-1m/README", "ml-1m/movies.dat",
                                 "ml-1m/ratings.dat", "ml-1m/users.dat"]
